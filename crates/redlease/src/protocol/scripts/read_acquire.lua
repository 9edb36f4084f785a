-- Take a read (shared) hold on a lock if no writer holds it or waits for
-- it: one round trip whether it succeeds or not (see shared.rs).
-- KEYS[1] lock key, which holds a writer's token, or ARGV[3] (the readers
-- marker) while readers hold; KEYS[2] the readers (a sorted set: member
-- the reader's token, score its expiry in this server's milliseconds);
-- KEYS[3] fencing counter; KEYS[4] writer-waiting mark. All in one hash
-- slot.
-- ARGV[1] token; ARGV[2] TTL in ms; ARGV[3] the readers marker, a value no
-- token can be; ARGV[4] '1' to append the server clock (TIME: seconds,
-- microseconds) to a "yes", as acquire.lua does; ARGV[5] '1' to bind the
-- hold to this server's replication lineage (the member is
-- 'token|master_replid', as acquire.lua's value); ARGV[6] NUMSUB, or
-- SHARDNUMSUB on a cluster; ARGV[7] the Locker's tag and ARGV[8] '1' to
-- mark a writer of another Locker for its waiters, as acquire.lua does;
-- ARGV[9] '1' when the Locker draws fencing tokens (the generation is
-- read, else 0); ARGV[10] the counter's idle expiry in ms.
-- Every expiry is this server's clock (TIME), never a client's: a
-- reader's hold ends at its own score, whatever other readers do. Members
-- whose score has passed are pruned; the lock key and the readers expire
-- at the latest live reader's expiry (PEXPIREAT), so nothing outlives
-- its last reader, and a plain exclusive acquire (SET NX) is refused
-- while any reader holds.
-- Returns {1, generation[, seconds, microseconds]} when held by us,
-- generation being the fencing counter's value, which a read never draws
-- (a missing counter is restarted, as a writer would restart it);
-- {0, pttl, waiting, owner} when a writer holds the lock (as acquire.lua
-- answers); {2, pttl, waiting, owner} when a writer waits for it (pttl is
-- the writer-waiting mark's, owner the waiting writer's fingerprint), so
-- that a stream of readers cannot starve it. With ARGV[8] '1', a mark of
-- another Locker's writer gets a final '*', as a holder does: the writer
-- then makes its own release heard by the readers waiting behind it
-- (writer_clear.lua).
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local function waiting()
  -- pcall: an ACL user without the PUBSUB command still gets its answer.
  local n = redis.pcall('PUBSUB', ARGV[6], KEYS[1] .. ':released')
  if type(n) == 'table' and type(n[2]) == 'number' then
    return n[2]
  end
  return 0
end
local holder = redis.pcall('GET', KEYS[1])
if holder and holder ~= ARGV[3] then
  if ARGV[8] == '1' and type(holder) == 'string'
      and string.sub(holder, 1, #ARGV[7]) ~= ARGV[7]
      and string.byte(holder, -1) ~= 42 then
    local hex = string.match(holder, '^%x*')
    if #hex == 48 and (#holder == 48 or string.byte(holder, 49) == 124) then
      redis.call('SET', KEYS[1], holder .. '*', 'KEEPTTL')
    end
  end
  return {0, redis.call('PTTL', KEYS[1]), waiting(), owner_of(holder)}
end
local mark = redis.call('GET', KEYS[4])
if mark then
  -- A writer waits only while its Locker listens for the lock on its own
  -- channel (KEYS[1] .. ':released:' and the tag that begins the mark's
  -- token, subscribed before the writer marks itself): a mark whose
  -- Locker no longer listens (its process or connection ended) goes at
  -- once, as a queue place does. A waiting multi-lock's mark (its claim
  -- on the name holds the same token: acquire_all.lua) lasts as its
  -- reservations do. pcall: an ACL user without PUBSUB keeps the mark
  -- until it expires.
  local token = string.match(mark, '^[^*]*')
  local own = KEYS[1] .. ':released:' .. string.sub(token, 1, 16)
  local n = redis.pcall('PUBSUB', ARGV[6], own)
  if type(n) == 'table' and n[2] == 0
      and redis.call('GET', KEYS[1] .. ':claim') ~= token then
    redis.call('DEL', KEYS[4])
    mark = false
  end
end
if mark then
  if ARGV[8] == '1' and string.sub(mark, 1, #ARGV[7]) ~= ARGV[7]
      and string.byte(mark, -1) ~= 42 then
    redis.call('SET', KEYS[4], mark .. '*', 'KEEPTTL')
  end
  return {2, redis.call('PTTL', KEYS[4]), waiting(), owner_of(mark)}
end
local generation = 0
if ARGV[9] == '1' then
  generation = redis.call('GET', KEYS[3])
  if generation then
    generation = tonumber(generation)
    if not generation then
      return redis.error_reply('ERR the fencing counter is not a number')
    end
  else
    -- No counter: it expired idle, or a restart lost it. Restarted here
    -- as acquire.lua restarts it, from the clock in microseconds cut to
    -- 100 ms: above every token drawn before, and below the next
    -- writer's, which counts up from it.
    generation = tonumber(clock[1]) * 1000000 + math.floor(tonumber(clock[2]) / 100000) * 100000
    redis.call('SET', KEYS[3], string.format('%.0f', generation), 'PX', ARGV[10])
  end
end
local member = ARGV[1]
if ARGV[5] == '1' then
  member = member .. '|' .. string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)')
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('%.0f', now))
redis.call('ZADD', KEYS[2], string.format('%.0f', now + tonumber(ARGV[2])), member)
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
if not holder then
  redis.call('SET', KEYS[1], ARGV[3])
end
redis.call('PEXPIREAT', KEYS[1], last)
redis.call('PEXPIREAT', KEYS[2], last)
if ARGV[4] == '1' then
  return {1, generation, tonumber(clock[1]), tonumber(clock[2])}
end
return {1, generation}
