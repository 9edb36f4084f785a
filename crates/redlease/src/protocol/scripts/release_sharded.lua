-- Delete the lock only if it still holds our token: never someone else's.
-- Then announce the release, so waiters retry at once instead of polling,
-- if a waiter of another Locker marked the lock: waiters of our own Locker
-- are woken in-process, and a release nobody else waits for costs no
-- PUBLISH (see refused.lua for the mark).
-- KEYS[1] lock key; ARGV[1] token; ARGV[2], only for the cleanup of a
-- failed attempt: announce nothing (the lock was never ours, so nothing
-- was freed).
-- The key holds the token, then '|lineage' if bound to a replication
-- lineage (acquire.lua), then '*' if marked: ours in any lineage, marked
-- or not.
-- The release is announced on KEYS[1] .. ':released' (keys.rs) with the
-- first 16 hex digits of the token's SHA-1 as its id: the same on every
-- node, so waiters can count the nodes that confirmed one release, and
-- nothing usable of the token. This is the cluster's copy of release.lua,
-- the same script with SPUBLISH, so that the message stays in the lock's
-- shard.
-- Every argument and every call costs Redis time on every release, so
-- the common case (ours, unbound, unmarked) is one comparison, and the
-- channel and the id are spelled here, only when published.
-- Returns 1 if deleted, 0 if not ours.
local value = redis.call('GET', KEYS[1])
if value == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
local n = #ARGV[1]
if not value or string.sub(value, 1, n) ~= ARGV[1] then
  return 0
end
local next = string.byte(value, n + 1)
if next ~= 124 and next ~= 42 then -- '|' or '*'
  return 0
end
redis.call('DEL', KEYS[1])
if not ARGV[2] and string.byte(value, -1) == 42 then
  -- A waiting multi-lock's claim (acquire_all.lua) becomes its
  -- reservation: the name goes to it, not to whoever comes first.
  local claim = KEYS[1] .. ':claim'
  local left = redis.call('PTTL', claim)
  if left > 0 then
    redis.call('SET', KEYS[1], redis.call('GET', claim) .. '~', 'PX', left)
    redis.call('DEL', claim)
  end
  -- pcall: an ACL user without channel rights (or a server without
  -- SPUBLISH) can still release; its waiters fall back to their timers.
  redis.pcall('SPUBLISH', KEYS[1] .. ':released', string.sub(redis.sha1hex(ARGV[1]), 1, 16))
end
return 1
