-- Raise the fencing counter to at least ARGV[1], so every later quorum
-- meets a node that has seen this token.
-- KEYS[1] fencing counter; ARGV[1] token; ARGV[2] idle expiry in ms.
-- Returns 1.
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if current < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
