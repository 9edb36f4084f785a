-- Take one of a semaphore's permits if one is free: one round trip
-- whether it succeeds or not (see permits.rs).
-- KEYS[1] lock key, which holds ARGV[3] (the semaphore's marker,
-- 'permits:N') while permits are held; KEYS[2] the holders (a sorted set:
-- member a holder's token, score its expiry in this server's
-- milliseconds); KEYS[3] fencing counter. All in one hash slot.
-- ARGV[1] token; ARGV[2] TTL in ms; ARGV[3] the marker; ARGV[4] N, the
-- number of permits; ARGV[5] '1' to append the server clock (TIME) to a
-- "yes"; ARGV[6] '1' to bind the permit to this server's replication
-- lineage (the member is 'token|master_replid'); ARGV[7] NUMSUB, or
-- SHARDNUMSUB on a cluster; ARGV[8] '1' to draw a fencing token;
-- ARGV[9] the counter's idle expiry in ms.
-- Every expiry is this server's clock: a holder's permit comes back at
-- its own score, whatever the others do. Members whose score has passed
-- are pruned first; the lock key and the holders expire at the latest
-- live holder's expiry.
-- Returns {1, fencing token (0 if none was drawn)[, seconds,
-- microseconds]} when a permit is ours; {0, pttl, waiting, owner} when
-- none is free (pttl: until the first holder's permit expires) or the
-- name is held as a lock (its PTTL, as acquire.lua answers; owner the
-- holder's fingerprint: the marker's for a full semaphore); {3, n} when
-- the name is a semaphore of n permits, not ARGV[4].
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local function waiting()
  -- pcall: an ACL user without the PUBSUB command still gets its answer.
  local n = redis.pcall('PUBSUB', ARGV[7], KEYS[1] .. ':released')
  if type(n) == 'table' and type(n[2]) == 'number' then
    return n[2]
  end
  return 0
end
local holder = redis.pcall('GET', KEYS[1])
if holder and holder ~= ARGV[3] then
  if type(holder) == 'string' then
    local other = string.match(holder, '^permits:(%d+)$')
    if other then
      return {3, tonumber(other)}
    end
    return {0, redis.call('PTTL', KEYS[1]), waiting(), owner_of(holder)}
  end
  return {0, redis.call('PTTL', KEYS[1]), waiting(), 0}
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('%.0f', now))
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[4]) then
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')[2]
  return {0, math.max(0, tonumber(first) - now), waiting(), owner_of(ARGV[3])}
end
local member = ARGV[1]
if ARGV[6] == '1' then
  member = member .. '|' .. string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)')
end
redis.call('ZADD', KEYS[2], string.format('%.0f', now + tonumber(ARGV[2])), member)
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
if not holder then
  redis.call('SET', KEYS[1], ARGV[3])
end
redis.call('PEXPIREAT', KEYS[1], last)
redis.call('PEXPIREAT', KEYS[2], last)
-- The fencing token, as acquire.lua draws it: a counter that expired
-- idle (or a node that restarted empty) starts again from the server
-- clock in microseconds, cut to 100 ms.
local fence = 0
if ARGV[8] == '1' then
  fence = redis.call('INCR', KEYS[3])
  if fence == 1 then
    fence = tonumber(clock[1]) * 1000000 + math.floor(tonumber(clock[2]) / 100000) * 100000
    redis.call('SET', KEYS[3], string.format('%.0f', fence))
  end
  redis.call('PEXPIRE', KEYS[3], ARGV[9])
end
if ARGV[5] == '1' then
  return {1, fence, tonumber(clock[1]), tonumber(clock[2])}
end
return {1, fence}
