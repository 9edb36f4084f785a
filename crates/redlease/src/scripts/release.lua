-- Delete the lock only if it still holds our token: never someone else's.
-- Then announce the release, so waiters retry at once instead of polling,
-- if a waiter of another Locker marked the lock (KEYS[2]; see keys.rs,
-- WAITERS_MARK): waiters of our own Locker are woken in-process, and a
-- release nobody else waits for costs no PUBLISH.
-- KEYS[1] lock key; KEYS[2] waiters mark; ARGV[1] token; ARGV[2] release
-- channel; ARGV[3] an id
-- of this release (random; lets waiters count the nodes that confirmed it),
-- or empty for the cleanup of a failed attempt, which is announced to no
-- one: the lock was never ours, so nothing was freed; ARGV[4] PUBLISH, or
-- SPUBLISH on a cluster (the channel shares the key's slot).
-- Returns 1 if deleted, 0 if not ours.
-- A lock bound to a lineage holds 'token|lineage': ours in any lineage.
local value = redis.call('GET', KEYS[1])
if value == ARGV[1] or (value and string.sub(value, 1, #ARGV[1] + 1) == ARGV[1] .. '|') then
  redis.call('DEL', KEYS[1])
  if ARGV[3] ~= '' and type(redis.pcall('GET', KEYS[2])) == 'string' then
    -- pcall: an ACL user without channel rights (or a server without
    -- SPUBLISH) can still release; its waiters fall back to their timers.
    redis.pcall(ARGV[4], ARGV[2], ARGV[3])
  end
  return 1
end
return 0
