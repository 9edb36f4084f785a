-- Set a new TTL only if the lock still holds our token. An expired key is
-- never re-created: GET returns nil and nothing is written.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] new TTL in milliseconds.
-- Returns 1 if extended, 0 if not ours.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
