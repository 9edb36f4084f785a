-- Delete the lock only if it still holds our token: never someone else's.
-- If a waiter marked the lock (refused.lua, acquire.lua), hand it on or
-- announce the release, so that waiters go on at once instead of polling;
-- a release nobody waits for costs no PUBLISH.
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
-- A marked release first hands the lock on: to a waiting multi-lock that
-- claimed it, or else to the first exclusive waiter in the lock's queue
-- (queue.lua), which alone is woken; only a lock nobody queues for is
-- freed and announced to every waiter. The cleanup of a failed attempt
-- (ARGV[2]) announces nothing: a waiter whose attempt took its turn on
-- some nodes and failed keeps its turn there, and takes it again.
-- Returns 1 if deleted (or handed on), 0 if not ours.
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
if string.byte(value, -1) ~= 42 then
  redis.call('DEL', KEYS[1])
  return 1
end
if ARGV[2] then
  -- A waiter in turn (ARGV[2] its place, ARGV[3] its ticket) keeps its
  -- turn: the lock is reserved for it again, for its window, to take at
  -- its next attempt. Unless a waiter with an earlier ticket queues here:
  -- then the lock goes to the first in line. So when waiters each took
  -- their turn on some nodes and none has a quorum, the earliest ends up
  -- with every node's turn, and nobody waits on a cycle.
  local window = string.match(ARGV[2], ':(%d+)$')
  if window then
    local first = redis.call('ZRANGE', KEYS[1] .. ':queue', 0, 0, 'WITHSCORES')
    if not first[1] or (tonumber(first[2]) or -math.huge) >= tonumber(ARGV[3]) then
      redis.call('SET', KEYS[1], ARGV[2] .. '~', 'PX', window)
      return 1
    end
    redis.call('DEL', KEYS[1])
    hand_off(KEYS[1], 'SPUBLISH', string.sub(redis.sha1hex(ARGV[1]), 1, 16), nil)
    return 1
  end
  redis.call('DEL', KEYS[1])
  return 1
end
local release = string.sub(redis.sha1hex(ARGV[1]), 1, 16)
-- Handed to the first in the queue (a waiting multi-lock's claim comes
-- first): it alone is woken.
if hand_off(KEYS[1], 'SPUBLISH', release, nil) then
  return 1
end
redis.call('DEL', KEYS[1])
-- pcall: an ACL user without channel rights (or a server without
-- SPUBLISH) can still release; its waiters fall back to their timers.
redis.pcall('SPUBLISH', KEYS[1] .. ':released', release)
return 1
