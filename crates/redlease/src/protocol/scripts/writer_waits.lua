-- Mark the lock as wanted by a writer, after readers refused its
-- exclusive acquire, so that new readers wait behind it (read_acquire.lua)
-- and a stream of readers cannot starve it.
-- KEYS[1] lock key; KEYS[2] writer-waiting mark.
-- ARGV[1] the writer's token; ARGV[2] how long the mark lasts, in ms (the
-- writer's TTL: refreshed by each refused attempt, so a writer that gives
-- up without clearing it, or vanishes, leaves no mark for longer); ARGV[3]
-- the readers marker.
-- Only while readers hold the lock (its key holds the marker): a writer
-- refused by a writer is not marked here. The last writer to ask holds
-- the mark; another's clear (writer_clear.lua) then leaves it alone. Our
-- own mark keeps its final '*' (readers of another Locker wait behind
-- it: see read_acquire.lua) when refreshed.
-- Returns 1 if marked, 0 if readers no longer hold the lock (retry now).
if redis.pcall('GET', KEYS[1]) ~= ARGV[3] then
  return 0
end
local mark = redis.call('GET', KEYS[2])
if mark == ARGV[1] .. '*' then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
else
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
end
return 1
