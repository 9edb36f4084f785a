-- Renew many read holds in one call (read_extend.lua for each): for lease
-- i, KEYS[2i-1] is its lock key and KEYS[2i] its readers; ARGV[2i-1] its
-- token and ARGV[2i] its new TTL in ms. ARGV[2n+1] the readers marker;
-- ARGV[2n+2] '1' if the holds are bound to the lineage they were taken in.
-- A reader is renewed only while live by this server's clock and while
-- the lock key holds the marker; nothing is re-created.
-- Returns one character per lease, '1' (extended) or '0' (not ours), as
-- extend_many.lua does.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local n = #KEYS / 2
local suffix = ''
if ARGV[2 * n + 2] == '1' then
  suffix = '|' .. string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)')
end
local out = {}
for i = 1, n do
  local key, readers = KEYS[2 * i - 1], KEYS[2 * i]
  local member = ARGV[2 * i - 1] .. suffix
  redis.call('ZREMRANGEBYSCORE', readers, '-inf', string.format('%.0f', now))
  if redis.call('ZSCORE', readers, member) and redis.pcall('GET', key) == ARGV[2 * n + 1] then
    redis.call('ZADD', readers, 'XX', string.format('%.0f', now + tonumber(ARGV[2 * i])), member)
    local last = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')[2]
    redis.call('PEXPIREAT', key, last)
    redis.call('PEXPIREAT', readers, last)
    out[i] = '1'
  else
    out[i] = '0'
  end
end
return table.concat(out)
