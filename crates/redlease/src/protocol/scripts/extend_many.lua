-- Renew many leases in one call: for each i, set a new TTL on KEYS[i] only
-- if it still holds our token (never re-creating an expired key).
-- ARGV[2i-1] token of KEYS[i]; ARGV[2i] its new TTL in milliseconds;
-- ARGV[2n+1] '1' if the locks are bound to the lineage they were taken in
-- (see acquire.lua). A value marked for waiters with a final '*'
-- (refused.lua) is still ours.
-- Returns one character per key, '1' (extended) or '0' (not ours): one
-- bulk string is far cheaper for the client to parse than an array of
-- thousands of integers.
local suffix = ''
if ARGV[2 * #KEYS + 1] == '1' then
  suffix = '|' .. string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)')
end
local out = {}
for i = 1, #KEYS do
  local ours = ARGV[2 * i - 1]
  if suffix ~= '' then
    ours = ours .. suffix
  end
  local value = redis.call('GET', KEYS[i])
  if value == ours or value == ours .. '*' then
    out[i] = redis.call('PEXPIRE', KEYS[i], ARGV[2 * i]) == 1 and '1' or '0'
  else
    out[i] = '0'
  end
end
return table.concat(out)
