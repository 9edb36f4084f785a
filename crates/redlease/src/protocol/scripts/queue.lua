-- The queue of a lock's exclusive waiters, put in front of the scripts
-- that hand the lock on (see turn.rs). KEYS[1] .. ':queue' is a sorted
-- set in the lock's hash slot: each waiter's place, 'TAG:ID:WINDOW' (its
-- Locker's tag, its number in that Locker, and its handoff window in ms),
-- scored by its arrival ticket.
-- hand_off gives the free lock `key` to the first waiter that still
-- listens: it takes the place off the queue, reserves the lock for it
-- ('TAG:ID:WINDOW~', for WINDOW ms by the server's clock) and wakes it with
-- 'ID:WINDOW:RELEASE' on its Locker's channel (key .. ':released:' .. TAG) by
-- `publish` (PUBLISH, or SPUBLISH on a cluster). A place whose Locker no
-- longer listens (the message reaches nobody: its process ended, or its
-- connection did) is dropped, and the next is tried, up to 8. `me` is
-- the caller's own place when it waits itself: reached first, it is taken
-- off the queue and returned, and the caller takes the lock. A waiting
-- multi-lock's claim (acquire_all.lua) is first in the queue (its name,
-- scored -inf): while the claim lasts, the lock becomes that set's
-- reservation for what is left of it, announced on the lock's release
-- channel, where the set listens. Returns the
-- place the lock went to, or nil if nobody listening queues (or the user
-- may not publish: then the first in line stays first and finds the lock
-- free when it looks).
local function hand_off(key, publish, release, me)
  local queue = key .. ':queue'
  for _ = 1, 8 do
    local head = redis.call('ZPOPMIN', queue)
    local place = head[1]
    if not place then
      return nil
    end
    if place == me then
      return me
    end
    local tag, id, window = string.match(place, '^(%x+):(%d+):(%d+)$')
    if not tag then
      local claim = key .. ':claim'
      local left = redis.call('PTTL', claim)
      if left > 0 and redis.call('GET', claim) == place then
        redis.call('SET', key, place .. '~', 'PX', left)
        redis.call('DEL', claim)
        redis.pcall(publish, key .. ':released', release)
        return place
      end
    else
      local heard = redis.pcall(publish, key .. ':released:' .. tag, id .. ':' .. window .. ':' .. release)
      if type(heard) ~= 'number' then
        redis.call('ZADD', queue, head[2], place)
        return nil
      end
      if heard > 0 then
        redis.call('SET', key, place .. '~', 'PX', window)
        return place
      end
    end
  end
  return nil
end

