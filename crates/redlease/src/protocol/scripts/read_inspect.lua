-- What a lock's keys say of how it is held, for the operator (inspect):
-- writes nothing. Live members are counted by this server's clock.
-- KEYS[1] lock key; KEYS[2] the readers; KEYS[3] writer-waiting mark (see
-- read_acquire.lua); KEYS[4] a semaphore's permit holders (see
-- permit_acquire.lua). ARGV[1] the readers marker.
-- Returns {mode, pttl, members, writer, permits}: mode 0 free, 1 held by
-- a writer (or by a value that is not a lock's), 2 held by readers, 3 a
-- semaphore's permits, 4 reserved for a waiting multi-lock (a value
-- ending in '~', see acquire_all.lua); pttl the lock key's PTTL; members the live readers
-- or permit holders; writer the mark's PTTL (-2: no writer waits);
-- permits the semaphore's number of permits (0 unless mode 3).
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local holder = redis.pcall('GET', KEYS[1])
local mode, members, permits = 0, KEYS[2], 0
if holder == ARGV[1] then
  mode = 2
elseif type(holder) == 'string' and string.match(holder, '^permits:%d+$') then
  mode, members = 3, KEYS[4]
  permits = tonumber(string.sub(holder, 9))
elseif type(holder) == 'string' and string.byte(holder, -1) == 126 then
  mode = 4
elseif holder then
  mode = 1
end
return {
  mode,
  redis.call('PTTL', KEYS[1]),
  redis.call('ZCOUNT', members, '(' .. string.format('%.0f', now), '+inf'),
  redis.call('PTTL', KEYS[3]),
  permits,
}
