-- Per-node usage recomputed from the pod records, atomically: every field of KEYS[2] (P:used) that differs
-- from the sum of the requests in KEYS[1] (P:pods) is fixed. Returns how many fields were wrong.
-- KEYS[3] (P:leader:term), ARGV[1]: the caller's fencing term, or "" (no leader election); a term lower
-- than KEYS[3]'s is refused with -1 before anything is written (see lua/txn.lua), a higher one recorded.
if ARGV[1] and ARGV[1] ~= '' then
  local current = tonumber(redis.call('GET', KEYS[3]) or '-1')
  local term = tonumber(ARGV[1])
  if term < current then return -1 end
  if term > current then redis.call('SET', KEYS[3], term) end
end
local want = {}
local recs = redis.call('HGETALL', KEYS[1])
for i = 2, #recs, 2 do
  local rec = cjson.decode(recs[i])
  for res, amount in pairs(rec.requests) do
    local f = rec.node .. '\031' .. res
    want[f] = (want[f] or 0) + amount
  end
end
local fixed = 0
local used = redis.call('HGETALL', KEYS[2])
for i = 1, #used, 2 do
  local f, v = used[i], tonumber(used[i + 1])
  local w = want[f] or 0
  if v ~= w then
    fixed = fixed + 1
    if w == 0 then redis.call('HDEL', KEYS[2], f) else redis.call('HSET', KEYS[2], f, w) end
  end
  want[f] = nil
end
for f, w in pairs(want) do
  if w ~= 0 then fixed = fixed + 1; redis.call('HSET', KEYS[2], f, w) end
end
return fixed
