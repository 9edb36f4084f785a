-- Who holds a lock, as one number a refusal carries (see refusal.rs,
-- `Owner`): 0 for a value that is not a string; a semaphore's marker
-- 'permits:N' is 2^27 + N, the readers' marker 'readers' is 2^27; any
-- other value is a holder's token (up to any '|lineage' and '*' mark),
-- and its number is 27 bits of the token's SHA-1, below 2^27: waiters
-- compare it across nodes to tell one owner on a quorum from a split
-- vote, and it reveals nothing usable of the token.
local function owner_of(value)
  if type(value) ~= 'string' then
    return 0
  end
  if value == 'readers' then
    return 134217728
  end
  local permits = string.match(value, '^permits:(%d+)$')
  if permits then
    return 134217728 + tonumber(permits)
  end
  return tonumber(string.sub(redis.sha1hex(string.match(value, '^[^|*]*')), 1, 7), 16) % 134217728
end
