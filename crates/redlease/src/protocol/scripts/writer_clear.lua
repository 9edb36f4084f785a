-- Remove a writer-waiting mark (writer_waits.lua) only if it is ours:
-- when the writer took the lock, or gives up waiting.
-- KEYS[1] lock key; KEYS[2] writer-waiting mark.
-- ARGV[1] the writer's token; ARGV[2] PUBLISH, or SPUBLISH on a cluster;
-- ARGV[3] '1' to announce it (a writer giving up: the readers waiting
-- behind its mark may go on at once), '0' not to (a writer that took the
-- lock: its release is what they wait for). The announcement is
-- release.lua's, on KEYS[1] .. ':released'.
-- Returns 1 if the mark was ours and is deleted, 0 if not.
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('DEL', KEYS[2])
  if ARGV[3] == '1' then
    redis.pcall(ARGV[2], KEYS[1] .. ':released', string.sub(redis.sha1hex(ARGV[1]), 1, 16))
  end
  return 1
end
return 0
