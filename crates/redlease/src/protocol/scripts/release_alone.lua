-- The release's common case, ahead of the engine (see release.lua,
-- which follows owner.lua and engine.lua): holders alone, unbound and
-- unmarked, with no waiter's place to put in line, are given back with
-- a GET each and one DEL before any of the engine's functions is defined,
-- which costs more than these commands. Anything else falls through,
-- with the values read in `values`.
local k = tonumber(ARGV[6])
local token = ARGV[1]
local place = ARGV[7 + k]
local values = nil
if place == '' then
  local alone = true
  for i = 1, k do
    alone = alone and ARGV[6 + i] == 'w'
  end
  if alone then
    values = {}
    local ours = true
    for i = 1, k do
      values[i] = redis.call('GET', KEYS[i])
      ours = ours and values[i] == token
    end
    if ours then
      redis.call('DEL', unpack(KEYS))
      for i = 1, k do
        -- Told to the name's watchers, as E.changed does.
        redis.pcall(ARGV[3], KEYS[i] .. ':changed', 'released')
      end
      return string.rep('1', k)
    end
  end
end
