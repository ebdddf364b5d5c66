"""The Lua behind the Redis driver's operator surface, scheduler, leases and backfill ledger."""

from __future__ import annotations

HELPERS = r"""
-- byte order, as the sorted sets keep it (Lua's own comparison follows the server's locale)
local function blt(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

local function reset(id, now)
  redis.call('HSET', jk(id), 'attempts', '0', 'run_at', now)
  redis.call('HDEL', jk(id), 'progress')
  set_state(id, 'ready', now)
end

local function bulk_rows(f)
  local out = {}
  for _, id in ipairs(redis.call('ZRANGE', stk(f.state), 0, -1)) do
    local h = redis.call('HMGET', jk(id), 'queue', 'name', 'tenant', 'run_at', 'key')
    if h[1] and (not opt(f.queue) or h[1] == f.queue) and (not opt(f.name) or h[2] == f.name)
      and (not opt(f.tenant) or h[3] == f.tenant) then
      table.insert(out, {id, h[1], livekey(h[2], h[3], h[5]), h[4]})
    end
  end
  return out
end

local function wake_all(set)
  local qs = {}
  for q in pairs(set) do table.insert(qs, q) end
  table.sort(qs)
  for _, q in ipairs(qs) do wake(q) end
end
"""

LIST = r"""
local f = cjson.decode(ARGV[1])
local limit = tonumber(f.limit)
local idx = T .. ':all'
if opt(f.state) then idx = stk(f.state) end
local function match(id)
  local h = redis.call('HMGET', jk(id), 'queue', 'name', 'state', 'tenant', 'key')
  if not h[1] then return false end
  if opt(f.queue) and h[1] ~= f.queue then return false end
  if opt(f.name) and h[2] ~= f.name then return false end
  if opt(f.state) and h[3] ~= f.state then return false end
  if opt(f.tenant) and h[4] ~= f.tenant then return false end
  if opt(f.key) and h[5] ~= f.key then return false end
  if opt(f.prefix) and string.sub(id, 1, #f.prefix) ~= f.prefix then return false end
  return true
end
local lo, hi = '-inf', '+inf'
if opt(f.from) then lo = f.from end
if opt(f.to) then hi = '(' .. f.to end
local out, offset = {}, 0
if opt(f.before) then
  local c, ci = f.before[1], f.before[2]
  if not opt(f.from) or num(c) > num(f.from) then lo = c end
  while #out < limit do
    local batch = redis.call('ZRANGEBYSCORE', idx, lo, hi, 'WITHSCORES', 'LIMIT', offset, 200)
    if #batch == 0 then break end
    offset = offset + #batch / 2
    for i = 1, #batch, 2 do
      local id, score = batch[i], num(batch[i + 1])
      if (score > num(c) or blt(ci, id)) and #out < limit and match(id) then table.insert(out, id) end
    end
  end
  local rev = {}
  for i = #out, 1, -1 do table.insert(rev, out[i]) end
  out = rev
else
  local c, ci = nil, nil
  if opt(f.after) then
    c, ci = f.after[1], f.after[2]
    if not opt(f.to) or num(c) < num(f.to) then hi = c end
  end
  while #out < limit do
    local batch = redis.call('ZREVRANGEBYSCORE', idx, hi, lo, 'WITHSCORES', 'LIMIT', offset, 200)
    if #batch == 0 then break end
    offset = offset + #batch / 2
    for i = 1, #batch, 2 do
      local id, score = batch[i], num(batch[i + 1])
      if (not c or score < num(c) or blt(id, ci)) and #out < limit and match(id) then table.insert(out, id) end
    end
  end
end
local rows = {}
for _, id in ipairs(out) do table.insert(rows, redis.call('HGETALL', jk(id))) end
return rows
"""

REMOVE = r"""
local st = redis.call('HGET', jk(ARGV[1]), 'state')
if not st then return 'nf' end
if st == 'running' then return 'running' end
delete(ARGV[1])
return 'ok'
"""

REQUEUE = r"""
local id, now, from = ARGV[1], ARGV[2], ARGV[3]
local h = redis.call('HMGET', jk(id), 'state', 'name', 'tenant', 'key', 'queue')
if not h[1] then return {'nf'} end
if LIVE[h[1]] then return {'live', h[1]} end
local holder = redis.call('HGET', T .. ':live', livekey(h[2], h[3], h[4]))
if holder then return {'dup', holder} end
if from ~= '' then
  local cut = redis.call('HGET', sk(id), from)
  if not cut then return {'nostep'} end
  local cseq = cjson.decode(cut).seq
  local flat = redis.call('HGETALL', sk(id))
  for i = 1, #flat, 2 do
    if cjson.decode(flat[i + 1]).seq >= cseq then redis.call('HDEL', sk(id), flat[i]) end
  end
end
reset(id, now)
wake(h[5])
return {'ok', redis.call('HGETALL', jk(id))}
"""

CANCEL = r"""
local id, now = ARGV[1], ARGV[2]
local st = redis.call('HGET', jk(id), 'state')
if not st or not LIVE[st] then return {} end
set_state(id, 'cancelled', now)
redis.call('HSET', jk(id), 'err', ARGV[3], 'code', 'X_JOB_CANCELLED')
return redis.call('HGETALL', jk(id))
"""

PROMOTE = r"""
local id, now = ARGV[1], ARGV[2]
local h = redis.call('HMGET', jk(id), 'state', 'run_at', 'queue')
if not h[1] then return {'nf'} end
if not (h[1] == 'delayed' or h[1] == 'ready') or num(h[2]) <= num(now) then return {'np', h[1]} end
redis.call('HSET', jk(id), 'run_at', now)
set_state(id, 'ready', now)
wake(h[3])
return {'ok', redis.call('HGETALL', jk(id))}
"""

REQUEUE_MANY = r"""
local f, now, max = cjson.decode(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local affected, moved = 0, {}
for _, r in ipairs(bulk_rows(f)) do
  if affected >= max then break end
  if redis.call('HEXISTS', T .. ':live', r[3]) == 0 then
    reset(r[1], now)
    affected = affected + 1
    moved[r[2]] = true
  end
end
local keys, remaining = {}, 0
for _, r in ipairs(bulk_rows(f)) do
  if not keys[r[3]] and redis.call('HEXISTS', T .. ':live', r[3]) == 0 then
    keys[r[3]] = true
    remaining = remaining + 1
  end
end
wake_all(moved)
return {affected, remaining}
"""

REMOVE_MANY = r"""
local f, max = cjson.decode(ARGV[1]), tonumber(ARGV[2])
local rows = bulk_rows(f)
local affected = math.min(#rows, max)
for i = 1, affected do delete(rows[i][1]) end
return {affected, #rows - affected}
"""

PROMOTE_MANY = r"""
local f, now, max = cjson.decode(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local waiting = {}
for _, r in ipairs(bulk_rows(f)) do
  if num(r[4]) > num(now) then table.insert(waiting, r) end
end
local affected, moved = math.min(#waiting, max), {}
for i = 1, affected do
  redis.call('HSET', jk(waiting[i][1]), 'run_at', now)
  set_state(waiting[i][1], 'ready', now)
  moved[waiting[i][2]] = true
end
wake_all(moved)
return {affected, #waiting - affected}
"""

RESUME_QUEUE = r"""
redis.call('SREM', T .. ':paused:queues', ARGV[1])
wake(ARGV[1])
return 1
"""

ROLLUP = r"""
return fold_counters(num(ARGV[1]))
"""

LEADER_ACQUIRE = r"""
local name, holder, ttl, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local k = T .. ':leader:' .. name
local h = redis.call('HMGET', k, 'holder', 'acquired', 'expires')
local live = h[1] and num(h[3]) > num(now)
if live and h[1] ~= holder then return false end
local acquired = now
if live then acquired = h[2] end
local expires = fmt(num(now) + num(ttl))
redis.call('HSET', k, 'holder', holder, 'acquired', acquired, 'expires', expires)
if ARGV[5] == '1' then fold_counters(num(now)) end
return {holder, acquired, expires}
"""

LEADER_RELEASE = r"""
local k = T .. ':leader:' .. ARGV[1]
if redis.call('HGET', k, 'holder') ~= ARGV[2] then return 0 end
redis.call('DEL', k)
return 1
"""

LEASE = r"""
local op, key, holder, now = ARGV[1], ARGV[2], ARGV[3], num(ARGV[4])
local o, e = T .. ':lease:o:' .. key, T .. ':lease:e:' .. key
local live = {}
for _, h in ipairs(redis.call('ZRANGE', o, 0, -1)) do
  local exp = redis.call('HGET', e, h)
  if exp and num(exp) > now then table.insert(live, h) else
    redis.call('ZREM', o, h)
    redis.call('HDEL', e, h)
  end
end
if op == 'holders' then return live end
if op == 'release' then
  redis.call('ZREM', o, holder)
  redis.call('HDEL', e, holder)
  return 1
end
local expires = fmt(now + num(ARGV[5]))
if redis.call('HEXISTS', e, holder) == 1 then
  redis.call('HSET', e, holder, expires)
  return 1
end
if op == 'renew' or #live >= tonumber(ARGV[6]) then return 0 end
redis.call('ZADD', o, redis.call('INCR', T .. ':lease:seq'), holder)
redis.call('HSET', e, holder, expires)
return 1
"""

SCHEDULER_LOAD = r"""
local now = ARGV[1]
local out = {}
for i = 2, #ARGV do
  redis.call('HSETNX', T .. ':watermarks', ARGV[i], now)
  table.insert(out, redis.call('HGET', T .. ':watermarks', ARGV[i]))
end
return out
"""

SCHEDULER_FIRE = r"""
local f = cjson.decode(ARGV[1])
if redis.call('SISMEMBER', T .. ':paused:tasks', f.task) == 1 then return {'paused', 0} end
local wm = redis.call('HGET', T .. ':watermarks', f.task)
if not wm or num(wm) ~= num(f.previous) then return {'fenced', 0} end
for _, r in ipairs(f.requests) do r.on_conflict = 'dedupe' end
local out = insert(f.requests, f.now)
redis.call('HSET', T .. ':watermarks', f.task, f.watermark)
redis.call('HSET', T .. ':fires', f.task, f.occurrence .. ':' .. f.now)
for _, q in ipairs(out[2]) do wake(q) end
local inserted = 0
for _, a in ipairs(out[1]) do if a[3] == 0 then inserted = inserted + 1 end end
return {'fired', inserted}
"""

BACKFILL_BEGIN = r"""
local b, id = cjson.decode(ARGV[1]), ARGV[2]
local existing = redis.call('HGET', T .. ':bf:runs', b.run_id)
if existing then
  local k = T .. ':bf:' .. existing
  redis.call('HSET', k, 'status', 'running', 'updated', b.now)
  if opt(b.app) then redis.call('HSET', k, 'app', b.app) else redis.call('HDEL', k, 'app') end
  redis.call('HDEL', k, 'err', 'completed')
  return redis.call('HGETALL', k)
end
local k = T .. ':bf:' .. id
redis.call('HSET', k, 'id', id, 'name', b.name, 'checksum', b.checksum, 'status', 'running', 'rows', '0',
  'batches', '0', 'cursor', 'null', 'job', b.job_id, 'run', b.run_id, 'started', b.now, 'updated', b.now)
if opt(b.tenant) then redis.call('HSET', k, 'tenant', b.tenant) end
if opt(b.app) then redis.call('HSET', k, 'app', b.app) end
redis.call('HSET', T .. ':bf:runs', b.run_id, id)
redis.call('ZADD', T .. ':bf:all', b.now, id)
return redis.call('HGETALL', k)
"""

BACKFILL_PROGRESS = r"""
local k = T .. ':bf:' .. ARGV[1]
if redis.call('HGET', k, 'status') ~= 'running' then return 0 end
redis.call('HSET', k, 'rows', ARGV[2], 'batches', ARGV[3], 'cursor', ARGV[4], 'updated', ARGV[5])
return 1
"""

BACKFILL_FINISH = r"""
local f = cjson.decode(ARGV[1])
local k = T .. ':bf:' .. f.id
if redis.call('EXISTS', k) == 0 then return 0 end
redis.call('HSET', k, 'status', f.status, 'updated', f.now)
if opt(f.rows) then redis.call('HSET', k, 'rows', f.rows) end
if opt(f.batches) then redis.call('HSET', k, 'batches', f.batches) end
if f.status == 'failed' and opt(f.err) then redis.call('HSET', k, 'err', f.err) else redis.call('HDEL', k, 'err') end
if f.status == 'completed' then redis.call('HSET', k, 'completed', f.now) else redis.call('HDEL', k, 'completed') end
return 1
"""
