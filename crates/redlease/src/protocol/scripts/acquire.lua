-- Take a claim on one name or several, all or none, each in its hold
-- (engine.lua), and draw the fencing tokens: one round trip whether it
-- succeeds or not. On a cluster, one call per hash slot.
-- KEYS[1..k] the lock keys, in the canonical order; KEYS[k+1..2k] their
-- fencing counters, in the same order.
-- ARGV[1] token; ARGV[2] TTL in ms; ARGV[3] the counters' idle expiry in
-- ms; ARGV[4] '1' to bind the holds to this server's replication lineage
-- (a holder alone's value, or a member, is then 'token|master_replid');
-- ARGV[5] '1' to append this server's clock (TIME) to a "yes", for the
-- clock guard (vote_guard.rs); ARGV[6] NUMSUB, or SHARDNUMSUB on a
-- cluster; ARGV[7] '1' to draw fencing tokens; ARGV[8] the Locker's tag,
-- which begins its tokens; ARGV[9] '1' when the caller waits for the
-- claim if refused; ARGV[10] the waiter's place, 'TAG:ID:WINDOW' ('' for
-- an attempt not in line), whose hold of each name is added to it;
-- ARGV[11] its arrival ticket; ARGV[12] how long a queue lives after its
-- latest arrival, in ms; ARGV[13] PUBLISH, or SPUBLISH on a cluster;
-- ARGV[14] k; ARGV[15..14+k] each name's hold, spelled.
--
-- A name is ready for the claim when it is reserved for the waiter's
-- place, or when the queue's turn comes to the place and its hold fits
-- (the queue is served first: a waiter in line joins it at its ticket,
-- and waits for those before it); an attempt not in line is ready only
-- where nobody waits and its hold fits. A waiter of several names is in
-- line only up to the first name not ready for it, in the canonical
-- order (what it had after that is given back). With every name ready, the holds
-- are taken: a holder alone's value is marked ('*') if others wait. Else
-- nothing is taken; a waiter in line keeps its place in every queue and
-- the reservations it has (renewed for its window), and marks the holder
-- alone of each name it waits for, whose release then serves the queue;
-- an attempt that waits without a place (its first) marks such a holder
-- of another Locker, whose release is then announced.
--
-- A name taken, or a waiter new in its queue, is told to its watchers
-- (E.changed).
-- Returns {1, fence_1 .. fence_k[, seconds, microseconds]} when taken (a
-- fence is 0 when none was drawn; a read hold's is the counter's value,
-- never drawn; a missing counter restarts from the clock: see
-- restart_value); {0, i, pttl, waiting, owner} for the first name i not
-- ready (pttl: until its holders' first hold or the
-- reservation ends, -1 with no expiry; when refused for the waiters in
-- line, at most a second or the first one's handoff window; waiting:
-- its queue's length;
-- owner: who holds it, owner.lua, or 2^28 - 1 when nobody holds what it
-- needs but waiters came first; then the holder alone's owner label and
-- time, as its token's tail gives them (engine.lua, E.owner_part)); {3, n} when a name is a semaphore of
-- n permits, not the number asked (nothing written).
local k = tonumber(ARGV[14])
local token, ttl = ARGV[1], tonumber(ARGV[2])
local numsub, publish = ARGV[6], ARGV[13]
local prefix = ARGV[10]
local holds, states, places = {}, {}, {}
for i = 1, k do
  holds[i] = E.hold(ARGV[14 + i])
  if not holds[i] then
    return redis.error_reply('ERR unknown hold ' .. tostring(ARGV[14 + i]))
  end
  states[i] = E.state(KEYS[i])
  if holds[i].kind == 'p' and states[i].kind == 'p' and states[i].n ~= holds[i].n then
    return {3, states[i].n}
  end
  if prefix ~= '' then
    places[i] = prefix .. ':' .. ARGV[14 + i]
  end
end
local id = string.sub(redis.sha1hex(token), 1, 16)
local ready, reserved, first = {}, {}, nil
for i = 1, k do
  local key, st, h, place = KEYS[i], states[i], holds[i], places[i]
  local queue = key .. ':queue'
  if place and first then
    -- After a name not ready, a waiter is not in line: it waits in line
    -- for a prefix of its names in the canonical order, plus the first
    -- it lacks, so that no two takers (nor one that nests single names in
    -- that order) wait on each other in a circle. What it had here goes.
    redis.call('ZREM', queue, place)
    if E.unreserve(key, st, place, h) and redis.call('EXISTS', queue) == 1 then
      E.serve(key, st, publish, numsub, id, nil)
    end
    ready[i] = false
  elseif place then
    reserved[i] = E.reserved_for(key, st, place, h)
    ready[i] = reserved[i]
    if ready[i] then
      -- Handed to us.
    elseif redis.call('EXISTS', queue) == 0 and E.fits(st, h) then
      -- Nobody in line and room: ours without a turn in the queue (the
      -- same as joining it and being served at once, for less).
      ready[i] = true
    else
      if redis.call('ZADD', queue, 'NX', ARGV[11], place) == 1 then
        E.changed(key, publish, 'queued')
      end
      ready[i] = E.serve(key, st, publish, numsub, id, place)
      reserved[i] = ready[i]
    end
  elseif redis.call('EXISTS', queue) == 1 then
    E.serve(key, st, publish, numsub, id, nil)
    ready[i] = redis.call('EXISTS', queue) == 0 and E.fits(st, h)
  else
    ready[i] = E.fits(st, h)
  end
  if not ready[i] then
    first = first or i
  end
end

if first then
  for i = 1, k do
    local key, st, h, place = KEYS[i], states[i], holds[i], places[i]
    if place and i > first then
      -- Not in line here (see above).
    elseif place and ready[i] then
      -- Ours here: kept for our window while the other names come.
      local _, _, window = E.place(place)
      E.reserve(key, st, place, h, window)
    elseif place then
      E.mark(key, st)
      local queue = key .. ':queue'
      if redis.call('PTTL', queue) < tonumber(ARGV[12]) then
        redis.call('PEXPIRE', queue, ARGV[12])
      end
    elseif ARGV[9] == '1' and st.kind == 'w' and type(st.value) == 'string'
        and string.sub(st.value, 1, #ARGV[8]) ~= ARGV[8] then
      E.mark(key, st)
    end
  end
  local key, st = KEYS[first], states[first]
  -- Refused for the waiters in line, not for a holder (refusal.rs,
  -- `Owner::QUEUED`): what it needs is there, or reserved for another.
  local queued = st.kind == 'reserved' or E.fits(st, holds[first])
  local window = nil
  if queued or st.kind == 'free' then
    local head = redis.call('ZRANGE', key .. ':queue', 0, 0)[1]
    local _, _, w = E.place(head or '')
    window = w
  end
  local pttl
  if st.kind == 'r' or st.kind == 'p' then
    local soonest = redis.call('ZRANGE', E.set_of(key, st), 0, 0, 'WITHSCORES')[2]
    pttl = soonest and math.max(0, tonumber(soonest) - E.now()) or 0
  elseif st.kind == 'free' then
    -- Free, but handed to the waiters before us: look again after a
    -- handoff window.
    pttl = window or 0
  else
    pttl = redis.call('PTTL', key)
    if pttl == -2 then
      pttl = 0
    end
  end
  local waiting = redis.call('ZCARD', key .. ':queue')
  local owner = owner_of(st.value)
  if queued then
    owner = 268435455
    -- Look again within a second, or the first waiter's handoff window
    -- if shorter: it may be gone without a word (its process killed),
    -- and is passed over at the next look.
    local look = math.min(window or 1000, 1000)
    if pttl < 0 or look < pttl then
      pttl = look
    end
  end
  return {0, first, pttl, waiting, owner, E.owner_part(st.value)}
end

-- Where a missing fencing counter restarts: this server's clock in
-- microseconds, above every token an earlier counter of the name gave
-- here (each took a script run, a microsecond at least, and the clock
-- does not step back). Cut to 100 ms, so that the nodes' new counters
-- agree and need no write-back, once the server has been up a second:
-- an earlier counter ended before it started, more than 100 ms ago. A
-- server up less than a second may have restarted empty within the same
-- 100 ms as its lost counter was made, and the cut value would repeat
-- that counter's tokens (the model checker found it, docs/safety.md):
-- there the clock is taken whole.
local function restart_value()
  local t = E.time()
  local micros = tonumber(t[2])
  local up = string.match(redis.call('INFO', 'server'), 'uptime_in_seconds:(%d+)')
  if up and tonumber(up) >= 1 then
    micros = math.floor(micros / 100000) * 100000
  end
  return tonumber(t[1]) * 1000000 + micros
end

local value = E.member(token, ARGV[4] == '1')
local out = {1}
for i = 1, k do
  local key, st, h, place = KEYS[i], states[i], holds[i], places[i]
  local queue = key .. ':queue'
  -- Our reservation becomes our hold (a holder alone's is overwritten;
  -- our place left the queue when its turn came).
  if reserved[i] and h.kind ~= 'w' then
    E.unreserve(key, st, place, h, true)
  end
  local fence = 0
  if h.kind == 'w' then
    -- Marked where others may wait, so that its release serves them: a
    -- waiter that came through the line is marked without a look (its
    -- release finds the line empty, or not). An attempt not in line was
    -- ready only with the queue empty (above).
    if place then
      redis.call('SET', key, value .. '*', 'PX', ttl)
    else
      redis.call('SET', key, value, 'PX', ttl)
    end
  else
    E.add(key, st, value, h, E.now() + ttl)
  end
  if ARGV[7] == '1' then
    local counter = KEYS[k + i]
    if h.kind == 'r' then
      -- A reader draws nothing: its token is the generation of the last
      -- write this node saw.
      fence = redis.call('GET', counter)
      if fence then
        fence = tonumber(fence)
        if not fence then
          return redis.error_reply('ERR the fencing counter is not a number')
        end
      else
        fence = restart_value()
        redis.call('SET', counter, E.ms(fence), 'PX', ARGV[3])
      end
    else
      fence = redis.call('INCR', counter)
      if fence == 1 then
        fence = restart_value()
        redis.call('SET', counter, E.ms(fence))
      end
      redis.call('PEXPIRE', counter, ARGV[3])
    end
  end
  out[i + 1] = fence
  E.changed(key, publish, 'taken')
end
if ARGV[5] == '1' then
  local t = E.time()
  out[k + 2] = tonumber(t[1])
  out[k + 3] = tonumber(t[2])
end
return out
