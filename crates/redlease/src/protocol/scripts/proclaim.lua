-- An election's leader says what it leads with: its record, beside the
-- lock key it holds alone, names the hold by its id (the first 16 hex
-- digits of the SHA-1 of its token, nothing usable of the token) and
-- says 'ID\tTERM\tREV\tVALUE'. A reader trusts the record only while
-- the name's holder alone has that id (inspect.lua), so a leader that
-- resigned, or whose hold ended, leaves nothing anyone believes.
-- KEYS[1] the lock key; KEYS[2] the leader record.
-- ARGV[1] token; ARGV[2] 'TERM\tREV\tVALUE'; ARGV[3] the record's
-- expiry in ms (the leader writes it again before then); ARGV[4] PUBLISH,
-- or SPUBLISH on a cluster.
-- A record of the same hold with a higher REV stays, its expiry renewed
-- (a proclaim that arrives late never undoes a later one). The change is told to the
-- name's watchers (E.changed).
-- Returns 1 when written (or a later one stands), 0 when the name is not
-- held by this token.
local token = ARGV[1]
if not E.owns(redis.pcall('GET', KEYS[1]), token) then
  return 0
end
local id = string.sub(redis.sha1hex(token), 1, 16)
local rev = tonumber(string.match(ARGV[2], '^%d+\t(%d+)\t'))
local old = redis.call('GET', KEYS[2])
if old and string.sub(old, 1, 17) == id .. '\t' then
  local was = tonumber(string.match(old, '^%x+\t%d+\t(%d+)\t'))
  if was and rev and was > rev then
    -- Kept, and kept alive as this one would have been.
    redis.call('PEXPIRE', KEYS[2], ARGV[3])
    return 1
  end
end
redis.call('SET', KEYS[2], id .. '\t' .. ARGV[2], 'PX', ARGV[3])
E.changed(KEYS[1], ARGV[4], 'proclaimed')
return 1
