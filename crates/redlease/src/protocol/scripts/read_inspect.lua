-- What a lock's keys say of its two modes, for the operator (inspect):
-- writes nothing. The live readers are counted by this server's clock.
-- KEYS[1] lock key; KEYS[2] the readers; KEYS[3] writer-waiting mark (see
-- read_acquire.lua). ARGV[1] the readers marker.
-- Returns {mode, pttl, readers, writer}: mode 0 free, 1 held by a writer
-- (or by a value that is not a lock's), 2 held by readers; pttl the lock
-- key's PTTL; readers the number of live readers; writer the mark's PTTL
-- (-2: no writer waits).
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local holder = redis.pcall('GET', KEYS[1])
local mode = 0
if holder == ARGV[1] then
  mode = 2
elseif holder then
  mode = 1
end
return {
  mode,
  redis.call('PTTL', KEYS[1]),
  redis.call('ZCOUNT', KEYS[2], '(' .. string.format('%.0f', now), '+inf'),
  redis.call('PTTL', KEYS[3]),
}
