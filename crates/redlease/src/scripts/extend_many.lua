-- Renew many leases in one call: for each i, set a new TTL on KEYS[i] only
-- if it still holds our token (never re-creating an expired key).
-- ARGV[2i-1] token of KEYS[i]; ARGV[2i] its new TTL in milliseconds.
-- Returns one character per key, '1' (extended) or '0' (not ours): one
-- bulk string is far cheaper for the client to parse than an array of
-- thousands of integers.
local out = {}
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[2 * i - 1] then
    out[i] = redis.call('PEXPIRE', KEYS[i], ARGV[2 * i]) == 1 and '1' or '0'
  else
    out[i] = '0'
  end
end
return table.concat(out)
