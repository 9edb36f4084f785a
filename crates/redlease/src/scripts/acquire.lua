-- Take the lock if it is free: one round trip whether it succeeds or not.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] TTL in milliseconds.
-- Returns {1, ttl} when taken by us, {0, pttl} when held by someone else
-- (pttl is -1 for a foreign key that never expires).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, tonumber(ARGV[2])}
end
return {0, redis.call('PTTL', KEYS[1])}
