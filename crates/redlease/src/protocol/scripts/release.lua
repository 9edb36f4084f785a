-- Give back a claim's holds, only where they are still ours (never
-- anyone else's), and serve each name's queue (engine.lua) with what was
-- freed. On a cluster, one call per hash slot.
-- KEYS[1..k] the lock keys.
-- ARGV[1] token; ARGV[2] '1' if the holds were bound to a lineage (a
-- member 'token|lineage' is ours in any lineage, as a value is); ARGV[3]
-- PUBLISH, or SPUBLISH on a cluster; ARGV[4] NUMSUB, or SHARDNUMSUB;
-- ARGV[5] '1' to announce what was freed and nobody in line took, on
-- KEYS[i] .. ':released' (for waiters not in line yet), '0' for the
-- cleanup of a failed attempt; ARGV[6] k; ARGV[7..6+k] each name's hold;
-- ARGV[7+k] a waiter's place ('TAG:ID:WINDOW', '' for none) put in line
-- at ARGV[8+k], its ticket, before the queue is served: the caller's own
-- (ARGV[9+k] '1', the cleanup of a waiter's failed attempt, which keeps
-- its turn: its reservation comes back without a wake-up), or the next
-- waiter of the caller's Locker, which waits in the process rather than
-- in line, and whose turn comes before anyone who arrived after it;
-- ARGV[10+k] how long a queue lives after its latest arrival, in ms.
-- The release is announced with the first 16 hex digits of the token's
-- SHA-1 as its id: the same on every node, and nothing usable of the
-- token.
-- The common case (a holder alone, unbound, unmarked: nobody waits in
-- line) is a GET and one DEL, in release_alone.lua, which runs before
-- the engine and leaves k, token, place and values (what it read) to
-- this script; a handoff to the first in line, the GET, the queue's pop,
-- the wake-up and the reservation.
-- Each name given back is told to its watchers (E.changed).
-- Returns one character per name, '1' (given back) or '0' (not ours).
local ticket, own = ARGV[8 + k], ARGV[9 + k] == '1'
local id = string.sub(redis.sha1hex(token), 1, 16)
local out = {}
for i = 1, k do
  local key, h = KEYS[i], E.hold(ARGV[6 + i])
  if not h then
    return redis.error_reply('ERR unknown hold ' .. tostring(ARGV[6 + i]))
  end
  local released, announce, held_alone = false, false, false
  local st
  if h.kind == 'w' then
    -- A holder alone's value, read once (above for the common case).
    local value = values and values[i]
    if not value then
      value = redis.pcall('GET', key)
    end
    if E.owns(value, token) then
      -- Marked: others wait, in line or about to be.
      announce = string.byte(value, -1) == 42
      st = {kind = 'free'}
      released, held_alone = true, true
    end
  else
    st = E.state(key)
    if st.kind == h.kind then
      -- Unbound, the member is the token: removed if there.
      local member = token
      if ARGV[2] == '1' then
        member = E.find(key, token, h, true)
      end
      if member and E.remove(key, st, member, h) > 0 then
        released = true
        -- The last reader frees the name; every permit frees room.
        announce = h.kind == 'p' or st.kind == 'free'
      end
    end
  end
  out[i] = released and '1' or '0'
  if released then
    E.changed(key, ARGV[3], 'released')
    local queue = key .. ':queue'
    local queued = not held_alone or announce
    local mine = nil
    -- The Locker's next waiter goes in line only where others wait in
    -- line: elsewhere the process hands the name on itself, at no cost
    -- here. The caller's own place always does (it keeps its turn).
    if place ~= '' and (own or (queued and redis.call('EXISTS', queue) == 1)) then
      mine = place .. ':' .. ARGV[6 + i]
      redis.call('ZADD', queue, 'NX', ticket, mine)
      if redis.call('PTTL', queue) < tonumber(ARGV[10 + k]) then
        redis.call('PEXPIRE', queue, ARGV[10 + k])
      end
      queued = true
    end
    local woken, served = 0, false
    if queued then
      served, woken = E.serve(key, st, ARGV[3], ARGV[4], id, own and mine or nil)
    end
    -- Our hold alone goes, unless the queue's turn took the name over.
    if held_alone and st.kind == 'free' then
      redis.call('DEL', key)
    end
    if ARGV[5] == '1' and announce and woken == 0 and not served then
      -- pcall: an ACL user without channel rights can still release; its
      -- waiters fall back to their timers.
      redis.pcall(ARGV[3], key .. ':released', id)
    end
  end
end
return table.concat(out)
