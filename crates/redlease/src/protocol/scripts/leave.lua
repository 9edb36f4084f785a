-- A waiter leaves the queues of a claim's names (engine.lua): it gave
-- up, or it took the claim and may still have a place or a reservation
-- on this node. What was reserved for it goes to the next in line, or,
-- with nobody in line taking it, is announced. On a cluster, one call per
-- hash slot.
-- KEYS[1..k] the lock keys.
-- ARGV[1] the waiter's place ('TAG:ID:WINDOW'); ARGV[2] PUBLISH, or
-- SPUBLISH on a cluster; ARGV[3] NUMSUB, or SHARDNUMSUB; ARGV[4] k;
-- ARGV[5..4+k] each name's hold.
-- Returns 1.
local id = string.sub(redis.sha1hex(ARGV[1]), 1, 16)
for i = 1, tonumber(ARGV[4]) do
  local key, h = KEYS[i], E.hold(ARGV[4 + i])
  if h then
    local place = ARGV[1] .. ':' .. ARGV[4 + i]
    redis.call('ZREM', key .. ':queue', place)
    local st = E.state(key)
    local gave_back = E.unreserve(key, st, place, h)
    -- A place of an older version ('TAG:ID:WINDOW', alone) too.
    if h.kind == 'w' then
      redis.call('ZREM', key .. ':queue', ARGV[1])
      gave_back = E.unreserve(key, st, ARGV[1], h) or gave_back
    end
    if gave_back then
      local served, woken = false, 0
      if redis.call('EXISTS', key .. ':queue') == 1 then
        served, woken = E.serve(key, st, ARGV[2], ARGV[3], id, nil)
      end
      if woken == 0 then
        redis.pcall(ARGV[2], key .. ':released', id)
      end
    end
  end
end
return 1
