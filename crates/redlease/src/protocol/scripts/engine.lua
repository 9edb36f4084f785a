-- One name's holds and its queue, for every mode: what the acquire,
-- release, extend, downgrade and leave scripts share (put in front of
-- each; see engine.rs).
--
-- A name's lock key K holds one of:
--   nil           free;
--   'readers'     shared holds, in K .. ':readers';
--   'permits:N'   holds of a semaphore of N permits, in K .. ':permits';
--   'PLACE~'      reserved for the queued waiter PLACE, which wants it
--                 alone (for the waiter's handoff window);
--   anything else one holder alone: 'token' (48 hex digits, then its
--                 owner: TAB label TAB milliseconds, see owner.rs), then
--                 '|lineage' when bound to a replication lineage, then '*'
--                 once waiters queue (its release must serve them); a
--                 value another program wrote counts as a holder too.
-- A member of the readers or permits set is a holder's 'token[|lineage]'
-- or a reservation 'PLACE~' for a queued waiter; a hold of W permits is W
-- members, the first as said and the others with '#2' .. '#W' after it.
-- Scores are expiries in this server's milliseconds: a member whose score
-- has passed is gone (pruned before every count). K and its set expire
-- with their latest member, so nothing outlives its last holder.
--
-- A hold is spelled 'w' (alone), 'r' (shared) or 'pN:W' (W of N permits).
-- K .. ':queue' holds the name's waiters in every mode: places
-- 'TAG:ID:WINDOW:HOLD' (the waiter's Locker's tag, its number there, its
-- handoff window in ms, and its hold of this name), scored by the
-- waiter's arrival ticket, the same number on every node, so that every
-- node orders the waiters alike. The queue is served first come, first
-- served: each waiter in turn that fits what is free gets a reservation
-- and is woken on its Locker's channel (K .. ':released:' .. TAG, with
-- 'ID:WINDOW:RELEASE:HOLD', RELEASE the id of what freed it); the
-- first that does not fit stops the walk, so no later waiter, however
-- small its hold, overtakes it. A waiter whose Locker no longer listens
-- (the wake-up reaches nobody, or nobody is subscribed) is passed over
-- at once.

local E = {}
local clock = nil

-- This server's clock: TIME, read once per script.
function E.time()
  clock = clock or redis.call('TIME')
  return clock
end

-- Now, in this server's milliseconds.
function E.now()
  local t = E.time()
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A score or a millisecond count as Redis takes it: no exponent.
function E.ms(n)
  return string.format('%.0f', n)
end

-- A hold as spelled ('w', 'r', 'pN:W'), or nil.
function E.hold(spelled)
  if spelled == 'w' then
    return {kind = 'w', weight = 1}
  end
  if spelled == 'r' then
    return {kind = 'r', weight = 1}
  end
  local n, w = string.match(spelled or '', '^p(%d+):(%d+)$')
  if n then
    return {kind = 'p', n = tonumber(n), weight = tonumber(w)}
  end
  return nil
end

-- The set that holds a shared or permit hold's members.
function E.set_of(key, h)
  if h.kind == 'r' then
    return key .. ':readers'
  end
  return key .. ':permits'
end

-- What K holds while members do.
function E.marker(h)
  if h.kind == 'r' then
    return 'readers'
  end
  return 'permits:' .. h.n
end

-- How a name is held now: {kind = 'free' | 'w' (one holder alone, or a
-- foreign value) | 'reserved' (for a waiter alone) | 'r' | 'p', value,
-- used (members live), n (a semaphore's permits)}. Members whose score
-- has passed are pruned, and a marker with no live member left is
-- deleted, unless `look` (a script that writes nothing).
function E.state(key, look)
  local v = redis.pcall('GET', key)
  if not v then
    return {kind = 'free'}
  end
  if type(v) ~= 'string' then
    -- Another type's key under the name: held, but by no lock.
    return {kind = 'w', value = false}
  end
  local kind, n = nil, nil
  if v == 'readers' then
    kind = 'r'
  else
    n = string.match(v, '^permits:(%d+)$')
    if n then
      kind, n = 'p', tonumber(n)
    end
  end
  if not kind then
    if string.byte(v, -1) == 126 then -- '~'
      return {kind = 'reserved', value = v}
    end
    return {kind = 'w', value = v}
  end
  local set = E.set_of(key, {kind = kind})
  local used
  if look then
    used = redis.call('ZCOUNT', set, '(' .. E.ms(E.now()), '+inf')
  else
    redis.call('ZREMRANGEBYSCORE', set, '-inf', E.ms(E.now()))
    used = redis.call('ZCARD', set)
    if used == 0 then
      redis.call('DEL', key)
      return {kind = 'free'}
    end
  end
  return {kind = kind, value = v, used = used, n = n}
end

-- Whether hold `h` fits what `st` holds now.
function E.fits(st, h)
  if st.kind == 'free' then
    return h.kind ~= 'p' or h.weight <= h.n
  end
  if h.kind == 'r' then
    return st.kind == 'r'
  end
  if h.kind == 'p' then
    return st.kind == 'p' and st.n == h.n and st.used + h.weight <= h.n
  end
  return false
end

-- The members of a hold of `weight` named `member`.
local function each_member(member, weight, visit)
  visit(member)
  for i = 2, weight do
    visit(member .. '#' .. i)
  end
end

-- Adds `member` with hold `h` (its W members, until `expiry`) to the
-- name's set, makes K the set's marker if it was free, and lets both
-- expire with the latest member.
function E.add(key, st, member, h, expiry)
  local set = E.set_of(key, h)
  local score = E.ms(expiry)
  local batch = {}
  local function flush()
    if #batch > 0 then
      redis.call('ZADD', set, unpack(batch))
      batch = {}
    end
  end
  each_member(member, h.weight, function(m)
    batch[#batch + 1] = score
    batch[#batch + 1] = m
    if #batch >= 1000 then
      flush()
    end
  end)
  flush()
  if st.kind == 'free' then
    redis.call('SET', key, E.marker(h))
    st.kind, st.value, st.used, st.n = h.kind, E.marker(h), 0, h.n
  end
  st.used = st.used + h.weight
  local last = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')[2]
  redis.call('PEXPIREAT', key, last)
  redis.call('PEXPIREAT', set, last)
end

-- Removes `member`'s hold `h` from the name's set; the number of members
-- removed. With none left, K is freed; with `keep` (a hold added at once
-- in its place), K and the set keep their marker and expiry for E.add.
function E.remove(key, st, member, h, keep)
  local set = E.set_of(key, h)
  local removed = 0
  local batch = {}
  local function flush()
    if #batch > 0 then
      removed = removed + redis.call('ZREM', set, unpack(batch))
      batch = {}
    end
  end
  each_member(member, h.weight, function(m)
    batch[#batch + 1] = m
    if #batch >= 1000 then
      flush()
    end
  end)
  flush()
  if removed > 0 and st.kind == h.kind then
    st.used = st.used - removed
    if keep then
      return removed
    end
    local last = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')[2]
    if last then
      redis.call('PEXPIREAT', key, last)
      redis.call('PEXPIREAT', set, last)
    else
      redis.call('DEL', key)
      st.kind, st.value, st.used = 'free', nil, nil
    end
  end
  return removed
end

-- Whether what is free of the name is reserved for `place` (hold `h`).
function E.reserved_for(key, st, place, h)
  local r = place .. '~'
  if h.kind == 'w' then
    return st.kind == 'reserved' and st.value == r
  end
  return st.kind == h.kind and redis.call('ZSCORE', E.set_of(key, h), r) ~= false
end

-- Reserves the name for `place` (hold `h`) for `window` ms.
function E.reserve(key, st, place, h, window)
  if h.kind == 'w' then
    redis.call('SET', key, place .. '~', 'PX', window)
    st.kind, st.value = 'reserved', place .. '~'
  else
    E.add(key, st, place .. '~', h, E.now() + window)
  end
end

-- Gives back `place`'s reservation (hold `h`), if it has one; whether
-- it had. `keep`: as for E.remove (a shared or permit hold only).
function E.unreserve(key, st, place, h, keep)
  if h.kind == 'w' then
    if st.kind == 'reserved' and st.value == place .. '~' then
      redis.call('DEL', key)
      st.kind, st.value = 'free', nil
      return true
    end
    return false
  end
  return st.kind == h.kind and E.remove(key, st, place .. '~', h, keep) > 0
end

-- A place's parts: tag, id, window (ms) and hold (spelled), or nil. A
-- place of an older version, 'TAG:ID:WINDOW', wants the name alone.
function E.place(place)
  local tag, id, window, hold = string.match(place, '^(%x+):(%d+):(%d+):(.+)$')
  if tag then
    return tag, id, tonumber(window), hold
  end
  tag, id, window = string.match(place, '^(%x+):(%d+):(%d+)$')
  if tag then
    return tag, id, tonumber(window), 'w'
  end
  return nil
end

-- Whether the Locker tagged `tag` listens for the name (a subscriber of
-- its own channel); `numsub` is NUMSUB or SHARDNUMSUB. Unknown (the ACL
-- denies PUBSUB): yes.
function E.listens(key, tag, numsub)
  local n = redis.pcall('PUBSUB', numsub, key .. ':released:' .. tag)
  return type(n) ~= 'table' or type(n[2]) ~= 'number' or n[2] > 0
end

-- Hands what is free of the name (`st`) to its queue, first come, first
-- served (see the top). `publish` is PUBLISH or SPUBLISH, `numsub` NUMSUB
-- or SHARDNUMSUB, `release` the id the wake-ups carry. `me`: the
-- caller's own place, reserved without a wake-up when its turn comes and
-- it fits. Returns whether `me` was reserved, and how many waiters were
-- woken. Each waiter is taken off the queue as it is looked at (the
-- first that waits on is put back at its ticket): a handoff costs the
-- pop, the wake-up and the reservation.
function E.serve(key, st, publish, numsub, release, me)
  local queue = key .. ':queue'
  local mine, woken = false, 0
  for _ = 1, 16 do
    -- Held alone, or reserved for a waiter alone: nobody else fits.
    -- Every permit held or reserved: nobody fits (a waiter gone is
    -- passed over when there is room again).
    if st.kind == 'w' or st.kind == 'reserved' or (st.kind == 'p' and st.used >= st.n) then
      break
    end
    local head = redis.call('ZPOPMIN', queue)
    local place, ticket = head[1], head[2]
    if not place then
      break
    end
    local tag, id, window, spelled = E.place(place)
    local h = E.hold(spelled)
    if not h then
      -- Unreadable: dropped.
    elseif E.fits(st, h) then
      if place == me then
        E.reserve(key, st, place, h, window)
        mine = true
      else
        local message = id .. ':' .. window .. ':' .. release .. ':' .. spelled
        local heard = redis.pcall(publish, key .. ':released:' .. tag, message)
        if type(heard) ~= 'number' then
          -- The user may not publish: the first in line finds the name
          -- free when it looks.
          redis.call('ZADD', queue, ticket, place)
          break
        end
        if heard > 0 then
          E.reserve(key, st, place, h, window)
          woken = woken + 1
        end
      end
    elseif place == me or E.listens(key, tag, numsub) then
      redis.call('ZADD', queue, ticket, place)
      break
    end
  end
  return mine, woken
end

-- Tells the name's watchers that it changed (taken, released, a waiter
-- came or left, a leader proclaimed): `what` on K .. ':changed', by
-- `publish` (PUBLISH or SPUBLISH). They read the name again; the message
-- says what happened, for a person watching the channel. pcall: a user
-- without channel rights still takes and gives back; its watchers fall
-- back to their timers.
function E.changed(key, publish, what)
  redis.pcall(publish, key .. ':changed', what)
end

-- Marks a holder alone for its waiters, so that its release serves them
-- (a final '*'): only a value of this library (48 hex digits, then the
-- end, the owner's tab or '|lineage'), never a foreign key.
function E.mark(key, st)
  local v = st.value
  if st.kind ~= 'w' or type(v) ~= 'string' or string.byte(v, -1) == 42 then
    return
  end
  local hex, after = string.match(v, '^%x*'), string.byte(v, 49)
  if #hex == 48 and (after == nil or after == 9 or after == 124) then
    redis.call('SET', key, v .. '*', 'KEEPTTL')
    st.value = v .. '*'
  end
end

-- What follows a holder's token (48 hex digits) in a value or member, up
-- to '|lineage', the mark or a member's '#i': its owner ('\tLABEL\tMS',
-- see owner.rs), never the token; '' for a value of another kind.
function E.owner_part(v)
  if type(v) ~= 'string' or #string.match(v, '^%x*') < 48 then
    return ''
  end
  return string.match(string.sub(v, 49), '^[^|*#]*')
end

-- Whether `value` (K's, a holder alone) is `token`'s: the token, then
-- the end, '|lineage' or '*'.
function E.owns(value, token)
  if type(value) ~= 'string' or string.sub(value, 1, #token) ~= token then
    return false
  end
  local next = string.byte(value, #token + 1)
  return next == nil or next == 124 or next == 42
end

-- The member that names `token`'s hold in a set: 'token', or with
-- `bound`, 'token|lineage' of this server.
function E.member(token, bound)
  if bound then
    return token .. '|' .. string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)')
  end
  return token
end

-- The member of `token`'s hold in the set of `h`, as stored (bound to a
-- lineage: 'token|lineage' in any lineage), or nil.
function E.find(key, token, h, bound)
  local set = E.set_of(key, h)
  if not bound then
    if redis.call('ZSCORE', set, token) then
      return token
    end
    return nil
  end
  local prefix = token .. '|'
  for _, m in ipairs(redis.call('ZRANGE', set, 0, -1)) do
    if string.sub(m, 1, #prefix) == prefix and not string.find(m, '#', #prefix + 1, true) then
      return m
    end
  end
  return nil
end
