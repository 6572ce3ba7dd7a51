-- Every gang's record in one reply: for each group of four KEYS (its hash, its assumed and bound pod sets,
-- its rounds hash), {HGETALL, SMEMBERS, SMEMBERS, HGETALL}. Read-only; state/reads.py decodes it.
local out = {}
for i = 1, #KEYS, 4 do
  out[#out + 1] = {
    redis.call('HGETALL', KEYS[i]),
    redis.call('SMEMBERS', KEYS[i + 1]),
    redis.call('SMEMBERS', KEYS[i + 2]),
    redis.call('HGETALL', KEYS[i + 3]),
  }
end
return out
