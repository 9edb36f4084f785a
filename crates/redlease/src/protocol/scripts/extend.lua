-- Set a new TTL only if the lock still holds our token. An expired key is
-- never re-created: GET returns nil and nothing is written.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] new TTL in milliseconds;
-- ARGV[3] '1' if the lock is bound to the lineage it was taken in (see
-- acquire.lua): on a server of another lineage it is not ours.
-- A waiter of another Locker may have marked the value with a final '*'
-- (refused.lua): still ours.
-- Returns 1 if extended, 0 if not ours.
local ours = ARGV[1]
if ARGV[3] == '1' then
  ours = ours .. '|' .. string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)')
end
local value = redis.call('GET', KEYS[1])
if value == ours or value == ours .. '*' then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
