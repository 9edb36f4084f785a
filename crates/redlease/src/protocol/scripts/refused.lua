-- The follow-up to a refused plain acquire (set_nx.rs): mark the holder
-- for its waiters, and say how long it holds and how many wait.
-- KEYS[1] lock key; ARGV[1] the Locker's tag, which begins its tokens;
-- ARGV[2] NUMSUB, or SHARDNUMSUB on a cluster; ARGV[3] '1' when the
-- refused acquire waits for the lock afterwards (only then is the holder
-- marked: a try that gives up has no release to hear), '0' otherwise.
-- The mark: a holder that is not of this Locker gets '*' appended to its
-- value (its TTL kept), so that its release is published (release.lua); a
-- holder of this Locker wakes its waiters in-process and is left alone.
-- Only a redlease value is marked (48 hex digits, then the end, the
-- owner's tab or '|lineage'): a key of another program, or of a redlease version whose
-- tokens are 32 digits (it publishes every release), is never changed.
-- Whoever holds the lock now is the one marked, in one step with the
-- PTTL: a release before this finds the key gone (or a new holder, marked
-- here), one after it is published.
-- Returns {pttl, waiting}: the key's PTTL (-2 gone, -1 no expiry) and the
-- number of connections subscribed to KEYS[1] .. ':released' (0 if the
-- ACL denies PUBSUB).
local value = redis.pcall('GET', KEYS[1])
if ARGV[3] == '1' and type(value) == 'string'
    and string.sub(value, 1, #ARGV[1]) ~= ARGV[1]
    and string.byte(value, -1) ~= 42 then
  local hex = string.match(value, '^%x*')
  local after = string.byte(value, 49)
  if #hex == 48 and (after == nil or after == 9 or after == 124) then
    redis.call('SET', KEYS[1], value .. '*', 'KEEPTTL')
  end
end
local waiting = redis.pcall('PUBSUB', ARGV[2], KEYS[1] .. ':released')
if type(waiting) == 'table' and type(waiting[2]) == 'number' then
  waiting = waiting[2]
else
  waiting = 0
end
return {redis.call('PTTL', KEYS[1]), waiting}
