-- Turn a hold alone into a shared one, atomically: no writer can take
-- the name in between. On a cluster, one call per hash slot.
-- KEYS[1..k] the lock keys.
-- ARGV[1] token; ARGV[2] '1' if bound to a lineage (the read hold is
-- then bound to this server's); ARGV[3] PUBLISH, or SPUBLISH on a
-- cluster; ARGV[4] NUMSUB, or SHARDNUMSUB; ARGV[5] k.
-- Where the name is still ours alone (the token, in any lineage, marked
-- or not), it becomes a read hold of the same token, expiring when the
-- hold alone would have, and the queue is served: readers first in line
-- join at once (a writer first in line keeps the others behind it).
-- Returns one character per name, '1' (now shared) or '0' (not ours).
local token = ARGV[1]
local id = string.sub(redis.sha1hex(token), 1, 16)
local out = {}
for i = 1, tonumber(ARGV[5]) do
  local key = KEYS[i]
  local st = E.state(key)
  if st.kind == 'w' and E.owns(st.value, token) then
    local left = redis.call('PTTL', key)
    redis.call('DEL', key)
    st = {kind = 'free'}
    local shared = E.hold('r')
    E.add(key, st, E.member(token, ARGV[2] == '1'), shared, E.now() + math.max(left, 1))
    if redis.call('EXISTS', key .. ':queue') == 1 then
      E.serve(key, st, ARGV[3], ARGV[4], id, nil)
    end
    E.changed(key, ARGV[3], 'downgraded')
    out[i] = '1'
  else
    out[i] = '0'
  end
end
return table.concat(out)
