-- How a name is held, for the operator (inspect): writes nothing. Live
-- members are counted by this server's clock (engine.lua).
-- KEYS[1] the lock key.
-- Returns {mode, pttl, members, permits, waiting, writers}: mode 0 free,
-- 1 held alone (or by a value that is not a lock's), 2 held by readers,
-- 3 a semaphore's permits, 4 reserved for a waiter; pttl the lock key's
-- PTTL; members the live readers' or permits' members (reservations
-- included); permits the semaphore's number of permits (0 unless mode
-- 3); waiting the places in the queue; writers those of them that want
-- the name alone.
local st = E.state(KEYS[1], true)
local modes = {free = 0, w = 1, r = 2, p = 3, reserved = 4}
local queue = KEYS[1] .. ':queue'
local writers = 0
for _, place in ipairs(redis.call('ZRANGE', queue, 0, -1)) do
  local _, _, _, hold = E.place(place)
  if hold == 'w' then
    writers = writers + 1
  end
end
return {
  modes[st.kind],
  redis.call('PTTL', KEYS[1]),
  st.used or 0,
  st.n or 0,
  redis.call('ZCARD', queue),
  writers,
}
