-- Give back a waiting multi-lock's reservations and claims
-- (acquire_all.lua): when it stops waiting, and once it holds its names
-- (on the nodes that did not grant them, reservations and a claim may be
-- left).
-- KEYS[1..k] lock keys (one hash slot on a cluster). ARGV[1] the mark;
-- ARGV[2] PUBLISH, or SPUBLISH on a cluster.
-- A key that holds MARK~ is deleted and the release announced (as
-- release.lua's, with the mark's id): single lockers wait behind it. A
-- claim (the key .. ':claim') that holds MARK is deleted, and so is a
-- writer-waiting mark (the key .. ':writer') that holds MARK, announced:
-- readers wait behind it.
-- Returns how many reservations were given back.
local reserved = ARGV[1] .. '~'
local freed = 0
for i = 1, #KEYS do
  if redis.pcall('GET', KEYS[i]) == reserved then
    redis.call('DEL', KEYS[i])
    -- pcall: an ACL user without channel rights can still give it back.
    redis.pcall(ARGV[2], KEYS[i] .. ':released', string.sub(redis.sha1hex(ARGV[1]), 1, 16))
    freed = freed + 1
  end
  local claim = KEYS[i] .. ':claim'
  if redis.pcall('GET', claim) == ARGV[1] then
    redis.call('DEL', claim)
    redis.call('ZREM', KEYS[i] .. ':queue', ARGV[1])
  end
  local waits = redis.pcall('GET', KEYS[i] .. ':writer')
  if waits == ARGV[1] or waits == ARGV[1] .. '*' then
    redis.call('DEL', KEYS[i] .. ':writer')
    redis.pcall(ARGV[2], KEYS[i] .. ':released', string.sub(redis.sha1hex(ARGV[1]), 1, 16))
  end
end
return freed
