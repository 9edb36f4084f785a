-- End a read hold, or give back a semaphore's permit: remove our member,
-- and when no live member is left, free the lock key. Announced, so
-- waiters go on at once: for readers when the lock is freed (writers wait
-- for that), for a permit on every release (ARGV[6] '1': a permit is
-- free).
-- KEYS[1] lock key; KEYS[2] the readers or the permit holders (see
-- read_acquire.lua, permit_acquire.lua).
-- ARGV[1] token; ARGV[2] the marker the lock key holds meanwhile (the
-- readers', or the semaphore's); ARGV[3] '1' if the hold was
-- bound to a lineage: then the member is 'token|master_replid', and ours
-- in any lineage, as release.lua deletes a bound value (found by reading
-- the live readers: a bound release costs one read of the set);
-- ARGV[4] PUBLISH, or SPUBLISH on a cluster; ARGV[5] '1' to announce a
-- freed lock ('0' for the cleanup of a failed attempt, which freed
-- nothing anyone waits for); ARGV[6] '1' to announce every release of a
-- live member, not only the last.
-- Readers whose score has passed are pruned first. The announcement is
-- release.lua's: on KEYS[1] .. ':released', with the first 16 hex digits
-- of the token's SHA-1 as its id. With readers left, the lock key and the
-- readers expire at the latest one's expiry.
-- Returns 1 if our token was a live reader (and is removed), 0 if not.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('%.0f', now))
local removed = 0
if ARGV[3] == '1' then
  local bound = ARGV[1] .. '|'
  for _, member in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    if string.sub(member, 1, #bound) == bound then
      removed = removed + redis.call('ZREM', KEYS[2], member)
    end
  end
else
  removed = redis.call('ZREM', KEYS[2], ARGV[1])
end
local shared = redis.pcall('GET', KEYS[1]) == ARGV[2]
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
local freed = false
if last then
  if shared then
    redis.call('PEXPIREAT', KEYS[1], last)
  end
  redis.call('PEXPIREAT', KEYS[2], last)
elseif shared then
  freed = redis.call('DEL', KEYS[1]) == 1
  if freed and ARGV[5] == '1' then
    -- A waiting multi-lock's claim becomes its reservation (release.lua).
    local claim = KEYS[1] .. ':claim'
    local left = redis.call('PTTL', claim)
    if left > 0 then
      redis.call('SET', KEYS[1], redis.call('GET', claim) .. '~', 'PX', left)
      redis.call('DEL', claim)
    end
  end
end
if ARGV[5] == '1' and (freed or (removed > 0 and ARGV[6] == '1')) then
  -- pcall: an ACL user without channel rights can still release; its
  -- waiters fall back to their timers.
  redis.pcall(ARGV[4], KEYS[1] .. ':released', string.sub(redis.sha1hex(ARGV[1]), 1, 16))
end
if removed > 0 then
  return 1
end
return 0
