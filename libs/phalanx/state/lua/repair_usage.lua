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
-- The records are read a page at a time: HGETALL of 30,000 of them held every record and its decoded table in
-- the script's heap at once (tens of MiB, Redis's peak memory at a pass). Nothing writes KEYS[1] while the
-- script runs, so the scan sees each record; `seen` makes a record returned twice count once all the same.
local want, seen = {}, {}
local cursor = '0'
repeat
  local page = redis.call('HSCAN', KEYS[1], cursor, 'COUNT', 500)
  cursor = page[1]
  local items = page[2]
  for i = 1, #items, 2 do
    if not seen[items[i]] then
      seen[items[i]] = true
      local rec = cjson.decode(items[i + 1])
      for res, amount in pairs(rec.requests) do
        local f = rec.node .. '\031' .. res
        want[f] = (want[f] or 0) + amount
      end
    end
  end
until cursor == '0'
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
