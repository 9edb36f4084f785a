-- Delete the lock whoever holds it, in any mode: the operator's way
-- out of a stuck lock (Locker::force_release). The fencing counter stays,
-- so tokens keep growing, and so does the queue (engine.lua): the waiters
-- keep their places, and the first looks again at the announcement.
-- KEYS[1] lock key; KEYS[2] its readers; KEYS[3] a writer-waiting mark an
-- older version may have left; KEYS[4] a semaphore's permit holders. A
-- multi-lock's claim an older version may have left (KEYS[1] ..
-- ':claim') goes too. ARGV[1] release channel; ARGV[2] an id of this
-- release; ARGV[3] PUBLISH, or SPUBLISH on a cluster.
-- Returns 1 if a key was deleted, 0 if there was none.
if redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[1] .. ':claim') > 0 then
  redis.pcall(ARGV[3], ARGV[1], ARGV[2])
  redis.pcall(ARGV[3], KEYS[1] .. ':changed', 'forced')
  return 1
end
return 0
