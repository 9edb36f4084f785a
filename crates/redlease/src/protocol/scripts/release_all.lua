-- Release several locks taken together (acquire_all.lua): for each key,
-- give back our hold only if it is still ours, as release.lua (or, for a
-- read hold, read_release.lua) does, and announce each release that
-- waiters wait for.
-- KEYS[1..k] lock keys. ARGV[1] token; ARGV[2] PUBLISH, or SPUBLISH on a
-- cluster; ARGV[3] '1' to announce (a lease given back), '0' for the
-- cleanup of a failed attempt (nothing was freed that anyone waits for);
-- ARGV[4] each lock's mode, one character per key ('w' exclusive, 'r' a
-- read hold, whose readers are KEYS[i] .. ':readers'); ARGV[5] the
-- readers marker.
-- An exclusive lock's release is announced if a waiter of another Locker
-- marked it (a final '*'); a read hold's when it was the last reader. A
-- waiting multi-lock's claim on a freed lock becomes its reservation
-- (see release.lua).
-- Returns one character per key, '1' (given back) or '0' (not ours), as
-- extend_many.lua answers.
local n = #ARGV[1]
local id = nil
local function announce(key)
  id = id or string.sub(redis.sha1hex(ARGV[1]), 1, 16)
  -- pcall: an ACL user without channel rights can still release.
  redis.pcall(ARGV[2], key .. ':released', id)
end
local function hand_over(key)
  local claim = key .. ':claim'
  local left = redis.call('PTTL', claim)
  if left > 0 then
    redis.call('SET', key, redis.call('GET', claim) .. '~', 'PX', left)
    redis.call('DEL', claim)
  end
end
local clock = nil
local out = {}
for i = 1, #KEYS do
  local value = redis.pcall('GET', KEYS[i])
  if string.byte(ARGV[4], i) == 114 then -- 'r'
    clock = clock or redis.call('TIME')
    local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
    local set = KEYS[i] .. ':readers'
    redis.call('ZREMRANGEBYSCORE', set, '-inf', string.format('%.0f', now))
    local removed = redis.call('ZREM', set, ARGV[1])
    if removed == 0 then
      -- A hold bound to a lineage: 'token|master_replid', in any lineage.
      local bound = ARGV[1] .. '|'
      for _, member in ipairs(redis.call('ZRANGE', set, 0, -1)) do
        if string.sub(member, 1, #bound) == bound then
          removed = removed + redis.call('ZREM', set, member)
        end
      end
    end
    local last = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')[2]
    if value == ARGV[5] then
      if last then
        redis.call('PEXPIREAT', KEYS[i], last)
        redis.call('PEXPIREAT', set, last)
      else
        redis.call('DEL', KEYS[i])
        if ARGV[3] == '1' then
          hand_over(KEYS[i])
          announce(KEYS[i])
        end
      end
    end
    out[i] = removed > 0 and '1' or '0'
  else
    local ours = value == ARGV[1]
    if not ours and type(value) == 'string' and string.sub(value, 1, n) == ARGV[1] then
      local next = string.byte(value, n + 1)
      ours = next == 124 or next == 42 -- '|' or '*'
    end
    if ours then
      redis.call('DEL', KEYS[i])
      if ARGV[3] == '1' and string.byte(value, -1) == 42 then
        hand_over(KEYS[i])
        announce(KEYS[i])
      end
      out[i] = '1'
    else
      out[i] = '0'
    end
  end
end
return table.concat(out)
