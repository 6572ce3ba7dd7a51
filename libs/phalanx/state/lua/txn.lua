-- One optimistic transaction over Phalanx's state: check, then apply, atomically.
-- KEYS: every key the script may touch, declared by the caller (libs/phalanx/state/txn.py, Txn.script_call),
-- so a Redis Cluster client can route it (they share one hash tag): KEYS[1..8] are nodes, cap, used, pods,
-- podstate, bind:lock, bind:fence, leader:term, binding; further KEYS are named by index in `release` and `cmds`.
-- ARGV[1]: JSON {term?, lock?, fence?, expect?, release?, reserve?, facts?, set_state?, cmds?}.
-- `release`: {pod, gang, index of gang's assumed set, index of its bound set} (gang "" and 0, 0 for none);
-- the pod's record must name that gang (else a refusal: the caller's view of the pod is stale).
-- `cmds`: {op, key index, args...}.
-- `facts`: entries shaped like `reserve` for pods the API server already shows bound: recorded as bound and
-- counted without the capacity check (they hold their node whether or not it had room: counting them
-- keeps Phalanx from over-committing it further).
-- Returns {1, fence} on success (fence: the token this script's lock took, else 0), {0, reason, kind} when a
-- check fails (kind: capacity | locked | stale_fence | node_gone | pod_state, for the conflict metric) (nothing is written then, except that a taken lock has advanced the fence and a higher `term`
-- has been recorded), {2, reason} when `term` is stale (nothing at all is written).
-- `lock` = {token, lease_ms}: take the bind mutex for the length of this script (busy: {0, "locked"}),
-- advancing the fencing token as any acquisition does; used when every write of a bind is in here.
-- `term`: the fencing term of a scheduler replica elected leader (libs/phalanx/cluster/leader.py). The
-- term in Redis only rises: a caller whose term is lower has been deposed by a newer leader and gets
-- {2, reason} before anything is read or written; a higher term is recorded (a new leader's first commit,
-- should Redis have lost its claim). One GET per transaction.
local K_NODES, K_CAP, K_USED, K_PODS, K_STATE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local K_LOCK, K_FENCE, K_TERM, K_BINDING = KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local txn = cjson.decode(ARGV[1])
if txn.term then
  local current = tonumber(redis.call("GET", K_TERM) or "-1")
  local term = tonumber(txn.term)
  if term < current then
    return {2, "fenced out: leadership term " .. term .. " is older than the current leader's " .. current}
  end
  if term > current then redis.call("SET", K_TERM, term) end
end
local SEP = "\031"

local fence = 0
if txn.lock then
  if not redis.call("SET", K_LOCK, txn.lock[1], "NX", "PX", txn.lock[2]) then
    return {0, "locked", "locked"}
  end
  fence = redis.call("INCR", K_FENCE)
end
local function unlock()
  if txn.lock and redis.call("GET", K_LOCK) == txn.lock[1] then redis.call("DEL", K_LOCK) end
end

if txn.fence then
  local current = tonumber(redis.call("GET", K_FENCE) or "0")
  if current ~= tonumber(txn.fence) then
    unlock(); return {0, "fenced: lock token " .. tostring(txn.fence) .. " is stale (current " .. current .. ")", "stale_fence"}
  end
end

-- expect: {pod, state|"absent", node|""}
for _, e in ipairs(txn.expect or {}) do
  local state = redis.call("HGET", K_STATE, e[1])
  if e[2] == "absent" then
    if state then unlock(); return {0, "pod " .. e[1] .. " is already " .. state, "pod_state"} end
  else
    if state ~= e[2] then
      unlock(); return {0, "pod " .. e[1] .. " is " .. (state or "absent") .. ", expected " .. e[2], "pod_state"}
    end
    if e[3] ~= nil and e[3] ~= "" then
      local raw = redis.call("HGET", K_PODS, e[1])
      if not raw then unlock(); return {0, "pod " .. e[1] .. " has a state but no record", "pod_state"} end
      local rec = cjson.decode(raw)
      if rec.node ~= e[3] then unlock(); return {0, "pod " .. e[1] .. " is on " .. rec.node .. ", expected " .. e[3], "pod_state"} end
    end
  end
end

-- Net change of usage per node/resource: releases first, then reservations.
local delta = {}
local released = {}
for _, r in ipairs(txn.release or {}) do
  local pod = r[1]
  local raw = redis.call("HGET", K_PODS, pod)
  if raw then
    local rec = cjson.decode(raw)
    if (rec.gang or "") ~= r[2] then
      unlock(); return {0, "pod " .. pod .. " is reserved for gang '" .. (rec.gang or "") .. "', not '" .. r[2] .. "'", "pod_state"}
    end
    released[pod] = r
    for res, amount in pairs(rec.requests) do
      local f = rec.node .. SEP .. res
      delta[f] = (delta[f] or 0) - amount
    end
  end
end
-- New records (reserve: decided here; facts: bound already): each pod once, on an existing node. Returns an
-- error reason and its kind, or nil after adding their requests to `delta`.
local reserving = {}
local function add_records(entries)
  for _, r in ipairs(entries or {}) do
    local pod, node, requests = r[1], r[2], r[3]
    if reserving[pod] or (released[pod] == nil and redis.call("HEXISTS", K_STATE, pod) == 1) then
      return "pod " .. pod .. " is already reserved", "pod_state"
    end
    reserving[pod] = true
    if redis.call("HEXISTS", K_NODES, node) == 0 then return "node " .. node .. " does not exist", "node_gone" end
    for res, amount in pairs(requests) do
      local f = node .. SEP .. res
      delta[f] = (delta[f] or 0) + amount
    end
  end
  return nil
end
local refused, kind = add_records(txn.reserve)
if refused then unlock(); return {0, refused, kind} end
local checked = {}  -- the capacity check covers decisions, not facts
for f, d in pairs(delta) do checked[f] = d end
refused, kind = add_records(txn.facts)
if refused then unlock(); return {0, refused, kind} end
for f, d in pairs(checked) do
  if d > 0 then
    local cap = tonumber(redis.call("HGET", K_CAP, f) or "0")
    local used = tonumber(redis.call("HGET", K_USED, f) or "0")
    if used + d > cap then
      local node, res = string.match(f, "^(.*)" .. SEP .. "(.*)$")
      unlock(); return {0, "conflict: node " .. node .. " has " .. (cap - used) .. " " .. res .. " free, needs " .. d, "capacity"}
    end
  end
end

-- Commands on declared keys: only these ops. Checked before anything is written, so a refused command
-- leaves no partial transaction behind.
local ALLOWED = {HSET = true, HDEL = true, SADD = true, SREM = true, DEL = true, ZADD = true, ZREM = true,
  RPUSH = true, HINCRBY = true, HSETNX = true}
for _, c in ipairs(txn.cmds or {}) do
  if not ALLOWED[c[1]] then unlock(); return redis.error_reply("txn: command " .. tostring(c[1]) .. " is not allowed") end
  if KEYS[c[2]] == nil then unlock(); return redis.error_reply("txn: key index " .. tostring(c[2]) .. " is not declared") end
end

-- Apply.
for f, d in pairs(delta) do
  if d ~= 0 then redis.call("HINCRBY", K_USED, f, d) end
end
for pod, r in pairs(released) do
  redis.call("HDEL", K_PODS, pod)
  redis.call("HDEL", K_STATE, pod)
  redis.call("SREM", K_BINDING, pod)
  if r[3] > 0 then
    redis.call("SREM", KEYS[r[3]], pod)
    redis.call("SREM", KEYS[r[4]], pod)
  end
end
for _, r in ipairs(txn.reserve or {}) do
  redis.call("HSET", K_PODS, r[1], r[4])
  redis.call("HSET", K_STATE, r[1], "assumed")
end
for _, r in ipairs(txn.facts or {}) do
  redis.call("HSET", K_PODS, r[1], r[4])
  redis.call("HSET", K_STATE, r[1], "bound")
end
-- The binding set indexes podstate's "binding" entries (the binder's roll-forward reads it).
for _, s in ipairs(txn.set_state or {}) do
  redis.call("HSET", K_STATE, s[1], s[2])
  redis.call(s[2] == "binding" and "SADD" or "SREM", K_BINDING, s[1])
end
for _, c in ipairs(txn.cmds or {}) do
  local args = {}
  for i = 3, #c do args[#args + 1] = c[i] end
  redis.call(c[1], KEYS[c[2]], unpack(args))
end
unlock()
return {1, fence}
