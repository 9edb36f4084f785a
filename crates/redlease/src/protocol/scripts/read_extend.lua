-- Set a new TTL on a read hold only if it is still live: an expired
-- reader (its score passed, by this server's clock) or a token that never
-- read is refused, and nothing is re-created.
-- KEYS[1] lock key; KEYS[2] the readers (see read_acquire.lua).
-- ARGV[1] token; ARGV[2] new TTL in ms; ARGV[3] the readers marker;
-- ARGV[4] '1' if the hold is bound to the lineage it was taken in (see
-- read_acquire.lua): on a server of another lineage it is not ours.
-- A reader is live only while the lock key holds the readers marker too
-- (a lock key deleted by hand and taken by a writer ends every read).
-- The lock key and the readers then expire at the latest live reader's
-- expiry, which may be earlier than before when the TTL is shorter.
-- Returns 1 if extended, 0 if not ours.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local member = ARGV[1]
if ARGV[4] == '1' then
  member = member .. '|' .. string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)')
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('%.0f', now))
if not redis.call('ZSCORE', KEYS[2], member) or redis.pcall('GET', KEYS[1]) ~= ARGV[3] then
  return 0
end
redis.call('ZADD', KEYS[2], 'XX', string.format('%.0f', now + tonumber(ARGV[2])), member)
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
redis.call('PEXPIREAT', KEYS[1], last)
redis.call('PEXPIREAT', KEYS[2], last)
return 1
