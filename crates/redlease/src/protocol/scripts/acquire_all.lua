-- Take several locks at once, all or none, and draw a fencing token for
-- each if asked: one round trip whether it succeeds or not (see
-- many.rs). On a cluster, one call per hash slot: all its keys in that
-- slot.
-- KEYS[1..k] lock keys, in the canonical order; with ARGV[7] '1',
-- KEYS[k+1..2k] their fencing counters in the same order.
-- ARGV[1] token; ARGV[2] TTL in ms; ARGV[3] idle expiry of the counters in
-- ms; ARGV[4] '1' to bind the locks to this server's replication lineage
-- (as acquire.lua); ARGV[5] '1' to append the server clock (TIME) to a
-- "yes"; ARGV[6] NUMSUB, or SHARDNUMSUB on a cluster; ARGV[7] '1' to draw
-- fencing tokens; ARGV[8] the Locker's tag; ARGV[9] '1' to mark the
-- holders of another Locker for its waiters (as acquire.lua); ARGV[10] k;
-- ARGV[11] the waiter's reservation mark, or '' for an attempt that will
-- not wait; ARGV[12] how long a reservation lasts, in ms; ARGV[13]
-- PUBLISH, or SPUBLISH on a cluster; ARGV[14] each lock's mode, one
-- character per key: 'w' exclusive, 'r' a read hold (as read_acquire.lua
-- takes one: the readers in KEYS[i] .. ':readers', a writer's waiting
-- mark in KEYS[i] .. ':writer', the same hash tag); ARGV[15] the readers
-- marker.
-- Nothing is written unless every lock is free (for a read hold: held by
-- no writer, and no writer waits for it): then all are taken. A read
-- hold's fence is the counter's generation, never drawn.
-- Returns {1, fence_1 .. fence_k[, seconds, microseconds]} (each fence 0
-- when none was drawn) when all are taken by us; {0, i, pttl, waiting,
-- owner} when lock i (1-based) is held, the first held one in the order
-- given, as acquire.lua answers for it. Every held lock of another
-- Locker is marked, so that the release of any of them is published.
--
-- Reservations keep a waiting multi-lock from being starved by a stream
-- of single-name lockers that always leaves one of its names taken. A
-- refused waiter (ARGV[11] not empty) reserves the free names before the
-- first held one (a name it reads that other readers hold is left to
-- them), by writing MARK~ into their lock keys (a plain SET NX,
-- a reader or a permit is then refused, as by a holder), and claims the
-- first held one by writing MARK to its key .. ':claim' (the same hash
-- tag, so the same slot) and marking its holder, so that the holder's
-- release (release.lua, release_all.lua, read_release.lua) turns the
-- claim into a reservation instead of leaving the name to whoever comes
-- first. Its later names it leaves free, and gives back any it had
-- reserved: a waiter only ever holds reservations on a prefix of its
-- names in the canonical order, plus one claim, so waiters that reserve
-- (and single lockers that nest names in that order) cannot wait on each
-- other in a circle. A name reserved or claimed by another waiter counts
-- as held. Every reservation and claim lasts ARGV[12] ms and is renewed
-- by each refused attempt; taking the names uses them up. A claim on a
-- name readers hold that the waiter wants exclusive also sets the
-- writer-waiting mark (as writer_waits.lua), so that new readers queue
-- behind it; the grant or unreserve.lua removes it.
--
-- Waiters that reserve are served in the order of their arrival: a mark
-- is 48 hex digits, the Locker's tag (16), the waiter's arrival ticket
-- (16: microseconds by the waiter's clock, the same on every node) and
-- random digits (see reserve.rs). A reservation or claim of a waiter
-- that arrived later gives way to ours: its reserved name counts as free
-- (we reserve or take it over it), its claim becomes ours. So waiters
-- that reach the nodes in different orders (a request delayed on one
-- node by a lost packet) do not split a name's reservations between
-- them, node by node, with none on a quorum; and the earliest waiter
-- waits for holders only, never for another waiter, so no waiter waits
-- on another in a circle.
local k = tonumber(ARGV[10])
local modes, readers = ARGV[14], ARGV[15]
local value = ARGV[1]
if ARGV[4] == '1' then
  value = value .. '|' .. string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)')
end
local mark = ARGV[11]
local reserved = mark .. '~'
local clock = nil
local function now_ms()
  clock = clock or redis.call('TIME')
  return tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
end
local function shared(i)
  return string.byte(modes, i) == 114 -- 'r'
end
-- Whether our mark goes before `other`, another waiter's mark: the
-- earlier arrival ticket, or on a tie the lower mark.
local function before(other)
  local ours, theirs = string.sub(mark, 17, 32), string.sub(other, 17, 32)
  if ours ~= theirs then
    return ours < theirs
  end
  return mark < other
end
-- Whether `value` is another waiter's reservation that gives way to ours.
local function gives_way(value)
  return #mark > 0 and type(value) == 'string' and #value == 49
    and string.byte(value, 49) == 126 -- '~'
    and string.match(value, '^%x+~$') ~= nil and before(string.sub(value, 1, 48))
end
local function marked_by_another(i)
  local waits = redis.call('GET', KEYS[i] .. ':writer')
  return waits and (#mark == 0 or (waits ~= mark and waits ~= mark .. '*'))
end
local ours = {}
local theirs = {}
local read_held = {}
local first = nil
for i = 1, k do
  local holder = redis.pcall('GET', KEYS[i])
  read_held[i] = holder == readers
  if holder and #mark > 0 and holder == reserved then
    ours[i] = true
  elseif gives_way(holder) then
    -- Reserved by a later waiter: free to us (taken over if we reserve
    -- or take it).
    theirs[i] = true
  elseif shared(i) and (not holder or holder == readers) then
    -- Free to a reader, unless a writer waits for it.
    if marked_by_another(i) then
      first = first or i
    end
  elseif holder then
    first = first or i
    if ARGV[9] == '1' and type(holder) == 'string'
        and string.sub(holder, 1, #ARGV[8]) ~= ARGV[8]
        and string.byte(holder, -1) ~= 42 then
      local hex = string.match(holder, '^%x*')
      if #hex == 48 and (#holder == 48 or string.byte(holder, 49) == 124) then
        redis.call('SET', KEYS[i], holder .. '*', 'KEEPTTL')
      end
    end
  end
end
if first then
  if #mark > 0 then
    for i = 1, first - 1 do
      -- A name we read that readers hold now is left to them: its key
      -- is their marker, which their renewals look for.
      if not read_held[i] then
        redis.call('SET', KEYS[i], reserved, 'PX', ARGV[12])
      end
    end
    local claim = KEYS[first] .. ':claim'
    local claimed = redis.call('GET', claim)
    if claimed and claimed ~= mark and #claimed == 48 and before(claimed) then
      -- A later waiter's claim gives way to ours.
      redis.call('ZREM', KEYS[first] .. ':queue', claimed)
      claimed = nil
    end
    if not claimed or claimed == mark then
      redis.call('SET', claim, mark, 'PX', ARGV[12])
      -- First in the lock's queue (queue.lua), which the queue's own
      -- lifetime must outlast.
      local queue = KEYS[first] .. ':queue'
      redis.call('ZADD', queue, '-inf', mark)
      if redis.call('PTTL', queue) < tonumber(ARGV[12]) then
        redis.call('PEXPIRE', queue, ARGV[12])
      end
      -- Its release must look for the claim: a marked value's does.
      local holder = redis.pcall('GET', KEYS[first])
      if type(holder) == 'string' and string.byte(holder, -1) ~= 42 then
        local hex = string.match(holder, '^%x*')
        if #hex == 48 and (#holder == 48 or string.byte(holder, 49) == 124) then
          redis.call('SET', KEYS[first], holder .. '*', 'KEEPTTL')
        end
      end
      -- Readers hold it and we want it alone: new readers wait behind us.
      local waits = KEYS[first] .. ':writer'
      if holder == readers and not shared(first) then
        local current = redis.call('GET', waits)
        if current == mark .. '*' then
          redis.call('PEXPIRE', waits, ARGV[12])
        elseif not current or current == mark then
          redis.call('SET', waits, mark, 'PX', ARGV[12])
        end
      end
    end
    for i = first + 1, k do
      if ours[i] then
        redis.call('DEL', KEYS[i])
        redis.pcall(ARGV[13], KEYS[i] .. ':released', string.sub(redis.sha1hex(mark), 1, 16))
      end
      if redis.call('GET', KEYS[i] .. ':claim') == mark then
        redis.call('DEL', KEYS[i] .. ':claim')
        redis.call('ZREM', KEYS[i] .. ':queue', mark)
      end
    end
  end
  -- pcall: an ACL user without the PUBSUB command still gets its answer.
  local waiting = redis.pcall('PUBSUB', ARGV[6], KEYS[first] .. ':released')
  if type(waiting) == 'table' and type(waiting[2]) == 'number' then
    waiting = waiting[2]
  else
    waiting = 0
  end
  local owner = redis.pcall('GET', KEYS[first])
  local pttl = redis.call('PTTL', KEYS[first])
  if not owner or owner == readers and shared(first) then
    -- Refused by a waiting writer's mark: its owner and lifetime.
    owner = redis.call('GET', KEYS[first] .. ':writer')
    pttl = redis.call('PTTL', KEYS[first] .. ':writer')
  end
  owner = owner_of(owner)
  return {0, first, pttl, waiting, owner}
end
local out = {1}
for i = 1, k do
  local fence = 0
  if shared(i) then
    local now = now_ms()
    local set = KEYS[i] .. ':readers'
    redis.call('ZREMRANGEBYSCORE', set, '-inf', string.format('%.0f', now))
    redis.call('ZADD', set, string.format('%.0f', now + tonumber(ARGV[2])), value)
    local last = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')[2]
    if redis.pcall('GET', KEYS[i]) ~= readers then
      redis.call('SET', KEYS[i], readers)
    end
    redis.call('PEXPIREAT', KEYS[i], last)
    redis.call('PEXPIREAT', set, last)
    if ours[i] or theirs[i] then
      -- Readers refused by a reservation may join us now.
      redis.pcall(ARGV[13], KEYS[i] .. ':released', string.sub(redis.sha1hex(mark), 1, 16))
    end
    if ARGV[7] == '1' then
      -- The generation, as read_acquire.lua reads it (restarted from the
      -- clock if the counter is gone).
      fence = redis.call('GET', KEYS[k + i])
      if fence then
        fence = tonumber(fence)
        if not fence then
          return redis.error_reply('ERR the fencing counter is not a number')
        end
      else
        now_ms()
        fence = tonumber(clock[1]) * 1000000 + math.floor(tonumber(clock[2]) / 100000) * 100000
        redis.call('SET', KEYS[k + i], string.format('%.0f', fence), 'PX', ARGV[3])
      end
    end
  else
    -- Single lockers wait behind a reservation, readers behind our
    -- waiting mark once another Locker's marked it: publish the release.
    if ours[i] or theirs[i]
        or (#mark > 0 and redis.call('GET', KEYS[i] .. ':writer') == mark .. '*') then
      redis.call('SET', KEYS[i], value .. '*', 'PX', ARGV[2])
    else
      redis.call('SET', KEYS[i], value, 'PX', ARGV[2])
    end
    if ARGV[7] == '1' then
      -- As acquire.lua: a counter that expired idle restarts from the
      -- server clock in microseconds, cut to 100 ms.
      fence = redis.call('INCR', KEYS[k + i])
      if fence == 1 then
        local now = redis.call('TIME')
        fence = tonumber(now[1]) * 1000000 + math.floor(tonumber(now[2]) / 100000) * 100000
        redis.call('SET', KEYS[k + i], string.format('%.0f', fence))
      end
      redis.call('PEXPIRE', KEYS[k + i], ARGV[3])
    end
  end
  if #mark > 0 then
    if redis.call('GET', KEYS[i] .. ':claim') == mark then
      redis.call('DEL', KEYS[i] .. ':claim')
      redis.call('ZREM', KEYS[i] .. ':queue', mark)
    end
    local waits = redis.call('GET', KEYS[i] .. ':writer')
    if waits == mark or waits == mark .. '*' then
      redis.call('DEL', KEYS[i] .. ':writer')
    end
  end
  out[i + 1] = fence
end
if ARGV[5] == '1' then
  local now = redis.call('TIME')
  out[k + 2] = tonumber(now[1])
  out[k + 3] = tonumber(now[2])
end
return out
