-- A waiter leaves a lock's queue (queue.lua): it gave up, or it took the
-- lock and may still have a place on this node. A lock reserved for it
-- meanwhile goes to the next in line, or, with nobody listening in line,
-- is freed and announced.
-- KEYS[1] lock key; ARGV[1] the waiter's place; ARGV[2] PUBLISH, or
-- SPUBLISH on a cluster.
-- Returns 1.
redis.call('ZREM', KEYS[1] .. ':queue', ARGV[1])
if redis.call('GET', KEYS[1]) == ARGV[1] .. '~' then
  local release = string.sub(redis.sha1hex(ARGV[1]), 1, 16)
  if not hand_off(KEYS[1], ARGV[2], release, nil) then
    redis.call('DEL', KEYS[1])
    redis.pcall(ARGV[2], KEYS[1] .. ':released', release)
  end
end
return 1
