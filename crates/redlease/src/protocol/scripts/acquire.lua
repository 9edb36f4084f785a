-- Take the lock if it is free, and draw its fencing token if asked: one
-- round trip whether it succeeds or not. (A lock without a token or
-- durability is taken with plain commands instead: see set_nx.rs.)
-- KEYS[1] lock key; KEYS[2] fencing counter (in the same hash slot).
-- ARGV[1] token; ARGV[2] TTL in ms; ARGV[3] idle expiry of the counter in ms;
-- ARGV[4] '1' to bind the lock to this server's replication lineage
-- (durability on): the key holds 'token|master_replid', and an extend on a
-- server of another lineage (a promoted replica, a restart that lost the
-- data) finds it not ours.
-- ARGV[5] '1' to append the server clock (TIME: seconds, microseconds) to
-- a "yes", so the client can see the clock jump before it counts it (see
-- vote_guard.rs); a "no" needs no such check.
-- ARGV[6] NUMSUB, or SHARDNUMSUB on a cluster: with a "no" comes the number
-- of connections subscribed to the lock's release channel (KEYS[1] ..
-- ':released'), that is how many waiting processes watch the lock, so
-- that a crowd of waiters can spread its checks (see retry.rs).
-- ARGV[7] '1' to draw a fencing token, '0' to leave the counter alone.
-- ARGV[8] the Locker's tag, which begins its tokens. A "no" from a holder
-- of another Locker marks it for its waiters, as refused.lua does, so
-- that its release is published (a holder of the same Locker wakes its
-- waiters itself); only with ARGV[9] '1', when the acquire waits for the
-- lock after a "no" ('0': it gives up, and no release need be heard).
-- ARGV[10] the waiter's place in the lock's queue (queue.lua), '' for an
-- acquire that does not queue; then ARGV[11] its arrival ticket ('0': the
-- server's clock now, in microseconds, for a place not yet queued);
-- ARGV[12] how long the queue lives after its latest arrival, in ms;
-- ARGV[13] PUBLISH or SPUBLISH. A
-- waiter with a place takes the lock reserved for it, or a free lock when
-- it is first in line (a free lock with others before it is handed to the
-- first of them, and the waiter refused); refused, it keeps its place
-- (queued at its ticket if it had none) and marks any holder, of this
-- Locker too, so that the release hands the lock on. Its own value is
-- then marked: its release hands the lock on in turn.
-- Returns {1, fencing token (0 if none was drawn)[, seconds,
-- microseconds]} when taken by us,
-- {0, pttl, waiting, owner} when held by someone else (pttl is -1 for a
-- foreign key that never expires). owner names the holder (owner.lua):
-- waiters compare it across nodes to tell a lock held by one owner on a
-- quorum from a split vote between contenders.
local value = ARGV[1]
if ARGV[4] == '1' then
  value = value .. '|' .. string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)')
end
local place = ARGV[10] or ''
local queue = KEYS[1] .. ':queue'
local function ticket()
  if ARGV[11] ~= '0' then
    return ARGV[11]
  end
  local now = redis.call('TIME')
  return string.format('%.0f', tonumber(now[1]) * 1000000 + tonumber(now[2]))
end
local taken
local current
if place ~= '' then
  current = redis.call('GET', KEYS[1])
  if current == place .. '~' then
    taken = true
  elseif not current then
    if redis.call('ZADD', queue, 'NX', ticket(), place) == 1 then
      redis.call('PEXPIRE', queue, ARGV[12])
    end
    local release = string.sub(redis.sha1hex(ARGV[1]), 1, 16)
    taken = hand_off(KEYS[1], ARGV[13], release, place) == place
  end
  if taken then
    redis.call('SET', KEYS[1], value .. '*', 'PX', ARGV[2])
  end
else
  taken = redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2])
end
if taken then
  -- A counter that expired while idle (or a node that restarted empty)
  -- starts again from the server clock in microseconds, above every token
  -- handed out before it went idle; otherwise it counts up by one. The
  -- clock is cut to 100 ms, so nodes that start a counter together start
  -- it at the same value and need no second round trip to agree.
  -- (INCR of a missing key gives 1, which a live counter never is.)
  local fence = 0
  if ARGV[7] == '1' then
    fence = redis.call('INCR', KEYS[2])
    if fence == 1 then
      local now = redis.call('TIME')
      fence = tonumber(now[1]) * 1000000 + math.floor(tonumber(now[2]) / 100000) * 100000
      redis.call('SET', KEYS[2], string.format('%.0f', fence))
    end
    redis.call('PEXPIRE', KEYS[2], ARGV[3])
  end
  if ARGV[5] == '1' then
    local now = redis.call('TIME')
    return {1, fence, tonumber(now[1]), tonumber(now[2])}
  end
  return {1, fence}
end
-- pcall: an ACL user without the PUBSUB command still gets its answer.
local waiting = redis.pcall('PUBSUB', ARGV[6], KEYS[1] .. ':released')
if type(waiting) == 'table' and type(waiting[2]) == 'number' then
  waiting = waiting[2]
else
  waiting = 0
end
-- A waiter with a place read the holder already.
local owner = current
if place == '' then
  owner = redis.pcall('GET', KEYS[1])
end
if place ~= '' and ARGV[9] == '1' and owner
    and not redis.call('ZRANK', queue, place) then
  redis.call('ZADD', queue, ticket(), place)
  redis.call('PEXPIRE', queue, ARGV[12])
end
if ARGV[9] == '1' and type(owner) == 'string'
    and (place ~= '' or string.sub(owner, 1, #ARGV[8]) ~= ARGV[8])
    and string.byte(owner, -1) ~= 42 then
  local hex = string.match(owner, '^%x*')
  if #hex == 48 and (#owner == 48 or string.byte(owner, 49) == 124) then
    redis.call('SET', KEYS[1], owner .. '*', 'KEEPTTL')
  end
end
owner = owner_of(owner)
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -2 and place ~= '' then
  -- Free, and others are first in line (or were, if they no longer
  -- listen): look again after a handoff window.
  pttl = tonumber(string.match(place, '(%d+)$'))
end
return {0, pttl, waiting, owner}
