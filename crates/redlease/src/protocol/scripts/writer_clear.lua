-- Remove a writer-waiting mark (writer_waits.lua) only if it is ours:
-- when the writer took the lock, or gives up waiting.
-- KEYS[1] lock key; KEYS[2] writer-waiting mark.
-- ARGV[1] the writer's token; ARGV[2] PUBLISH, or SPUBLISH on a cluster;
-- ARGV[3] '1' for a writer giving up: the clear is announced on the
-- release channel (as release.lua's, on KEYS[1] .. ':released'), so the
-- readers waiting behind the mark go on at once; '0' for a writer that
-- took the lock: its release is what they wait for, so if readers of
-- another Locker marked the mark (a final '*', read_acquire.lua), the
-- writer's own value in KEYS[1] (its lease's token, ARGV[4], which is not
-- the mark's) gets the '*' too, as refused.lua marks a holder, and its
-- release is published.
-- Returns 1 if the mark was ours and is deleted, 0 if not.
local mark = redis.call('GET', KEYS[2])
if mark ~= ARGV[1] and mark ~= ARGV[1] .. '*' then
  return 0
end
redis.call('DEL', KEYS[2])
if ARGV[3] == '1' then
  redis.pcall(ARGV[2], KEYS[1] .. ':released', string.sub(redis.sha1hex(ARGV[1]), 1, 16))
elseif mark ~= ARGV[1] then
  local value = redis.pcall('GET', KEYS[1])
  if type(value) == 'string' and #ARGV[4] > 0
      and string.sub(value, 1, #ARGV[4]) == ARGV[4]
      and string.byte(value, -1) ~= 42 then
    redis.call('SET', KEYS[1], value .. '*', 'KEEPTTL')
  end
end
return 1
