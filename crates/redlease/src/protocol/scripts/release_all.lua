-- Release several locks taken together (acquire_all.lua): for each key,
-- delete it only if it still holds our token, as release.lua does, and
-- announce the release of each one a waiter of another Locker marked.
-- KEYS[1..k] lock keys. ARGV[1] token; ARGV[2] PUBLISH, or SPUBLISH on a
-- cluster; ARGV[3] '1' to announce (a lease given back), '0' for the
-- cleanup of a failed attempt (nothing was freed that anyone waits for).
-- Returns one character per key, '1' (deleted) or '0' (not ours), as
-- extend_many.lua answers.
local n = #ARGV[1]
local out = {}
for i = 1, #KEYS do
  local value = redis.call('GET', KEYS[i])
  local ours = value == ARGV[1]
  if not ours and value and string.sub(value, 1, n) == ARGV[1] then
    local next = string.byte(value, n + 1)
    ours = next == 124 or next == 42 -- '|' or '*'
  end
  if ours then
    redis.call('DEL', KEYS[i])
    if ARGV[3] == '1' and string.byte(value, -1) == 42 then
      -- A waiting multi-lock's claim becomes its reservation (release.lua).
      local claim = KEYS[i] .. ':claim'
      local left = redis.call('PTTL', claim)
      if left > 0 then
        redis.call('SET', KEYS[i], redis.call('GET', claim) .. '~', 'PX', left)
        redis.call('DEL', claim)
      end
      -- pcall: an ACL user without channel rights can still release.
      redis.pcall(ARGV[2], KEYS[i] .. ':released', string.sub(redis.sha1hex(ARGV[1]), 1, 16))
    end
    out[i] = '1'
  else
    out[i] = '0'
  end
end
return table.concat(out)
