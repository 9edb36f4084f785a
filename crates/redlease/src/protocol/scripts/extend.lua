-- Renew holds of one kind (engine.lua), many in one call: for each, a
-- new expiry only if the hold is still ours, never re-creating one that
-- expired. A lease of several names has a hold in each; on a cluster,
-- one call per hash slot.
-- KEYS[i] the lock key of hold i.
-- ARGV[1] '1' if the holds are bound to the lineage they were taken in:
-- on a server of another lineage they are not ours; ARGV[2] their hold,
-- spelled; ARGV[2i+1] the token of hold i, ARGV[2i+2] its new TTL in ms.
-- A holder alone's value marked for waiters ('*') is still ours. A
-- member is renewed only while live by this server's clock and while the
-- name holds its set's marker; a hold of W permits renews its W members.
-- Returns one character per hold, '1' (renewed) or '0' (not ours): one
-- bulk string is far cheaper for the client to parse than an array of
-- thousands of integers.
local suffix = ''
if ARGV[1] == '1' then
  suffix = '|' .. string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)')
end
local h = E.hold(ARGV[2])
if not h then
  return redis.error_reply('ERR unknown hold ' .. tostring(ARGV[2]))
end
local out = {}
if h.kind == 'w' then
  for i = 1, #KEYS do
    local ours = ARGV[2 * i + 1] .. suffix
    local value = redis.call('GET', KEYS[i])
    if value == ours or value == ours .. '*' then
      out[i] = redis.call('PEXPIRE', KEYS[i], ARGV[2 * i + 2]) == 1 and '1' or '0'
    else
      out[i] = '0'
    end
  end
  return table.concat(out)
end
local now = E.now()
local marker = E.marker(h)
for i = 1, #KEYS do
  local name, ours = KEYS[i], ARGV[2 * i + 1] .. suffix
  local set = E.set_of(name, h)
  redis.call('ZREMRANGEBYSCORE', set, '-inf', E.ms(now))
  if redis.call('ZSCORE', set, ours) and redis.pcall('GET', name) == marker then
    local score = E.ms(now + tonumber(ARGV[2 * i + 2]))
    local batch = {'XX', score, ours}
    for w = 2, h.weight do
      batch[#batch + 1] = score
      batch[#batch + 1] = ours .. '#' .. w
      if #batch >= 1000 then
        redis.call('ZADD', set, unpack(batch))
        batch = {'XX'}
      end
    end
    if #batch > 1 then
      redis.call('ZADD', set, unpack(batch))
    end
    local last = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')[2]
    redis.call('PEXPIREAT', name, last)
    redis.call('PEXPIREAT', set, last)
    out[i] = '1'
  else
    out[i] = '0'
  end
end
return table.concat(out)
