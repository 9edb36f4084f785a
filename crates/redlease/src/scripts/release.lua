-- Delete the lock only if it still holds our token: never someone else's.
-- Then announce the release, so waiters retry at once instead of polling,
-- if a waiter of another Locker marked the lock (KEYS[2]; see keys.rs,
-- WAITERS_MARK): waiters of our own Locker are woken in-process, and a
-- release nobody else waits for costs no PUBLISH.
-- KEYS[1] lock key; KEYS[2] waiters mark; ARGV[1] token; ARGV[2], only
-- for the cleanup of a failed attempt: announce nothing (the lock was
-- never ours, so nothing was freed).
-- The release is announced on KEYS[1] .. ':released' (keys.rs) with the
-- first 16 hex digits of the token's SHA-1 as its id: the same on every
-- node, so waiters can count the nodes that confirmed one release, and
-- nothing usable of the token. A cluster's copy of this script says
-- SPUBLISH instead (node.rs), so the message stays in the lock's shard.
-- Every argument costs Redis time on every release, so the channel and
-- the id are spelled here, and only when published.
-- Returns 1 if deleted, 0 if not ours.
-- A lock bound to a lineage holds 'token|lineage': ours in any lineage.
local value = redis.call('GET', KEYS[1])
if value == ARGV[1] or (value and string.sub(value, 1, #ARGV[1] + 1) == ARGV[1] .. '|') then
  redis.call('DEL', KEYS[1])
  if not ARGV[2] and type(redis.pcall('GET', KEYS[2])) == 'string' then
    -- pcall: an ACL user without channel rights (or a server without
    -- SPUBLISH) can still release; its waiters fall back to their timers.
    redis.pcall('PUBLISH', KEYS[1] .. ':released', string.sub(redis.sha1hex(ARGV[1]), 1, 16))
  end
  return 1
end
return 0
