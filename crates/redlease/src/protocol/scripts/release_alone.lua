-- The release's common case, ahead of the engine (see release.lua,
-- which follows owner.lua and engine.lua): a holder alone, unbound and
-- unmarked, with no waiter's place to put in line, is given back with one
-- GET and one DEL before any of the engine's functions is defined, which
-- costs more than the two commands. Anything else falls through, with the
-- value read in `first`.
local k = tonumber(ARGV[6])
local token = ARGV[1]
local place = ARGV[7 + k]
local first = nil
if k == 1 and ARGV[7] == 'w' then
  first = redis.call('GET', KEYS[1])
  if first == token and place == '' then
    redis.call('DEL', KEYS[1])
    return '1'
  end
end
