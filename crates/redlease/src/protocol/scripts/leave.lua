-- A waiter leaves the queues of a claim's names (engine.lua): it gave
-- up, or it took the claim and may still have a place or a reservation
-- on this node. Those behind it move up: the queue is served at once (a
-- waiter that stood first and did not fit no longer holds back those
-- after it that do), and what was reserved for it goes to the next in
-- line, or, with nobody in line taking it, is announced. On a cluster,
-- one call per hash slot.
-- KEYS[1..k] the lock keys.
-- ARGV[1] the waiter's place ('TAG:ID:WINDOW'); ARGV[2] PUBLISH, or
-- SPUBLISH on a cluster; ARGV[3] NUMSUB, or SHARDNUMSUB; ARGV[4] k;
-- ARGV[5..4+k] each name's hold.
-- A waiter gone from a queue is told to the name's watchers.
-- Returns 1.
local id = string.sub(redis.sha1hex(ARGV[1]), 1, 16)
for i = 1, tonumber(ARGV[4]) do
  local key, h = KEYS[i], E.hold(ARGV[4 + i])
  if h then
    local place = ARGV[1] .. ':' .. ARGV[4 + i]
    local left = redis.call('ZREM', key .. ':queue', place)
    local st = E.state(key)
    local gave_back = E.unreserve(key, st, place, h)
    -- A place of an older version ('TAG:ID:WINDOW', alone) too.
    if h.kind == 'w' then
      left = left + redis.call('ZREM', key .. ':queue', ARGV[1])
      gave_back = E.unreserve(key, st, ARGV[1], h) or gave_back
    end
    if gave_back or left > 0 then
      E.changed(key, ARGV[2], 'left')
      local woken = 0
      if redis.call('EXISTS', key .. ':queue') == 1 then
        local _
        _, woken = E.serve(key, st, ARGV[2], ARGV[3], id, nil)
      end
      if gave_back and woken == 0 then
        redis.pcall(ARGV[2], key .. ':released', id)
      end
    end
  end
end
return 1
