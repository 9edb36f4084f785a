-- How a name is held, for the operator (inspect): writes nothing. Live
-- members are counted by this server's clock (engine.lua).
-- KEYS[1] the lock key; KEYS[2] (optional) its election's leader record
-- (proclaim.lua).
-- Returns {mode, pttl, members, permits, waiting, writers}: mode 0 free,
-- 1 held alone (or by a value that is not a lock's), 2 held by readers,
-- 3 a semaphore's permits, 4 reserved for a waiter; pttl the lock key's
-- PTTL; members the live readers' or permits' members (reservations
-- included); permits the semaphore's number of permits (0 unless mode
-- 3); waiting the places in the queue; writers those of them that want
-- the name alone; holders {owner_1, weight_1, left_1, ...}: each
-- holder's owner ('\tLABEL\tMS[\tDELAY]' as its token's tail gives it,
-- '' when its value names none), never its token, its weight and the ms
-- until its hold ends (of a set, the 1,000 members that expire last are
-- read); leader: the leader record's 'TERM\tREV\tVALUE' when the record
-- is the holder alone's (its id, the first 16 hex digits of the SHA-1 of
-- the holder's token), else ''.
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
  holders = {E.owner_part(st.value), 1, redis.call('PTTL', KEYS[1])}
elseif st.kind == 'r' or st.kind == 'p' then
  local weights, order, lefts = {}, {}, {}
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
        lefts[base] = 0
      end
      weights[base] = weights[base] + 1
      lefts[base] = math.max(lefts[base], score - now)
    end
  end
  for _, base in ipairs(order) do
    holders[#holders + 1] = E.owner_part(base)
    holders[#holders + 1] = weights[base]
    holders[#holders + 1] = lefts[base]
  end
end
local leader = ''
if KEYS[2] and st.kind == 'w' and type(st.value) == 'string' then
  local record = redis.call('GET', KEYS[2])
  local id = string.sub(redis.sha1hex(string.match(st.value, '^[^|*]*')), 1, 16)
  if record and string.sub(record, 1, 17) == id .. '\t' then
    leader = string.sub(record, 18)
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
  leader,
}
