-- How a name is held, for the operator (inspect): writes nothing. Live
-- members are counted by this server's clock (engine.lua).
-- KEYS[1] the lock key.
-- Returns {mode, pttl, members, permits, waiting, writers}: mode 0 free,
-- 1 held alone (or by a value that is not a lock's), 2 held by readers,
-- 3 a semaphore's permits, 4 reserved for a waiter; pttl the lock key's
-- PTTL; members the live readers' or permits' members (reservations
-- included); permits the semaphore's number of permits (0 unless mode
-- 3); waiting the places in the queue; writers those of them that want
-- the name alone; holders {owner_1, weight_1, ...}: each holder's owner
-- ('\tLABEL\tMS' as its token's tail gives it, '' when its value names
-- none), never its token, and its weight (of a set, the 1,000 members
-- that expire last are read).
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
local holders = {}
if st.kind == 'w' and type(st.value) == 'string' then
  holders = {E.owner_part(st.value), 1}
elseif st.kind == 'r' or st.kind == 'p' then
  local weights, order = {}, {}
  -- The 1,000 members that expire last (ZRANGE by rank: the rule grants
  -- no ZRANGEBYSCORE), those still live.
  local last = redis.call('ZRANGE', E.set_of(KEYS[1], st), -1000, -1, 'WITHSCORES')
  local now = E.now()
  for i = 1, #last, 2 do
    local m, score = last[i], tonumber(last[i + 1])
    local base = string.match(m, '^[^#]*')
    if score > now and string.byte(base, -1) ~= 126 then -- live, not a reservation ('~')
      if not weights[base] then
        weights[base] = 0
        order[#order + 1] = base
      end
      weights[base] = weights[base] + 1
    end
  end
  for _, base in ipairs(order) do
    holders[#holders + 1] = E.owner_part(base)
    holders[#holders + 1] = weights[base]
  end
end
return {
  modes[st.kind],
  redis.call('PTTL', KEYS[1]),
  st.used or 0,
  st.n or 0,
  redis.call('ZCARD', queue),
  writers,
  holders,
}
