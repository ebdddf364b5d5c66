"""The Lua of the hot path: enqueue, claim, the settles, heartbeat, steps, stats, purge and fleet slots
(``driver.leases``) — one script per operation, the prelude of :mod:`.prelude` prepended to each.

Arguments are passed in ``ARGV`` as text; batches travel as one JSON document. A script answers
nested arrays of text (a row is its ``HGETALL``), which the driver decodes into its records — except
the claim, the hot path, which answers one JSON document (a row is its hash as an object; Lua's cjson
writes an empty table as ``{}``, so an empty list arrives as an empty object).
"""

from __future__ import annotations

ENQUEUE = r"""
local now = ARGV[1]
local out = insert(cjson.decode(ARGV[2]), now)
if out[1] == false then return {'refused', out[2]} end
for _, q in ipairs(out[2]) do wake(q) end
local flat = {}
for _, a in ipairs(out[1]) do table.insert(flat, {a[1], a[2], a[3]}) end
return {'ok', flat}
"""

CLAIM = r"""
local now, limit, worker, lease_until = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local spec = cjson.decode(ARGV[5])
if opt(spec.record) then redis.call('HSET', T .. ':workers', spec.record[1], spec.record[2]) end
local drop = {}
for _, n in ipairs(spec.drop) do drop[n] = true end
local function before(a, b)
  if a[1] ~= b[1] then return a[1] < b[1] end
  return a[2] < b[2]
end

-- a fair queue's part of the claim, in the order it hands its jobs out ({score, member, queue, lane} each):
-- the lanes least recently served first, at most cap of them, each at most its share of cap, round by round;
-- then what they leave of cap in the queue's own order
local function fair_pick(q, cap)
  local head = redis.call('ZRANGE', qk(q, 'due'), 0, cap - 1, 'WITHSCORES')
  local lane_of = {}
  for i = 1, #head, 2 do
    -- a row made due while the queue was not fair joins its lane when it reaches the head, so a queue
    -- whose lanes always fill the batch cannot leave it waiting
    local id = string.sub(head[i], 49)
    lane_of[head[i]] = redis.call('HGET', jk(id), 'dl') or file_lane(id, q, head[i + 1], head[i])
  end
  local lanes = redis.call('ZRANGE', qk(q, 'turns'), 0, cap - 1)
  local n = math.max(#lanes, 1)
  local share = math.max(math.ceil(cap / n), cap - n + 1)  -- the lanes fill the batch between them, round by round
  local rounds, picked = {}, {}
  for _, lane in ipairs(lanes) do
    local got = redis.call('ZRANGE', lanek(q, lane), 0, share - 1, 'WITHSCORES')
    for i = 1, #got, 2 do
      local r = (i + 1) / 2
      rounds[r] = rounds[r] or {}
      table.insert(rounds[r], {tonumber(got[i + 1]), got[i], q, lane})
      picked[got[i]] = true
    end
  end
  local jobs = {}
  for _, round in ipairs(rounds) do
    for _, o in ipairs(round) do table.insert(jobs, o) end
  end
  for i = 1, #head, 2 do
    if not picked[head[i]] then table.insert(jobs, {tonumber(head[i + 1]), head[i], q, lane_of[head[i]]}) end
  end
  while #jobs > cap do table.remove(jobs) end
  return {q = q, lanes = lanes, jobs = jobs}
end

local final, offered, fair = {}, {}, {}
for _, qc in ipairs(spec.queues) do
  local q, cap, is_fair = qc[1], qc[2], qc[3]
  if redis.call('SISMEMBER', T .. ':paused:queues', q) == 0 then
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', qk(q, 'timed'), '-inf', now)) do
      redis.call('ZREM', qk(q, 'timed'), id)
      push_due(id, q, is_fair)
    end
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', qk(q, 'leased'), '-inf', now)) do
      redis.call('ZREM', qk(q, 'leased'), id)
      local h = redis.call('HMGET', jk(id), 'attempts', 'max')
      if num(h[1]) >= num(h[2]) then  -- a lapsed final attempt: buried below, never handed out
        local score, dm = order_of(id)
        table.insert(final, {score, dm, id})
      else
        push_due(id, q, is_fair)
      end
    end
    if cap > 0 and is_fair then
      table.insert(fair, fair_pick(q, cap))
    elseif cap > 0 then
      local got = redis.call('ZRANGE', qk(q, 'due'), 0, cap - 1, 'WITHSCORES')
      for i = 1, #got, 2 do table.insert(offered, {tonumber(got[i + 1]), got[i], q}) end
    end
  end
end
local exhausted = {}
table.sort(final, before)
for _, f in ipairs(final) do
  local id = f[3]
  local name = redis.call('HGET', jk(id), 'name')
  local state = 'dead'
  if drop[name] then state = 'failed' end
  set_state(id, state, now)
  redis.call('HSET', jk(id), 'err', 'LEASE_LAPSED_FINAL_ATTEMPT')
  redis.call('HDEL', jk(id), 'code')
  count(name, state, '0', spec.bucket)
  table.insert(exhausted, hmap(redis.call('HGETALL', jk(id))))
end
table.sort(offered, before)
if #fair > 0 then
  -- each fair queue keeps its own order (its lanes' picks before its fill); the plain queues' offers, sorted,
  -- and the fair queues' are interleaved by their next job's claim order, so the limit cuts each from its end
  local lists, at, merged = {offered}, {1}, {}
  for _, f in ipairs(fair) do table.insert(lists, f.jobs); table.insert(at, 1) end
  while #merged < limit do
    local best = nil
    for k, l in ipairs(lists) do
      if l[at[k]] and (not best or before(l[at[k]], lists[best][at[best]])) then best = k end
    end
    if not best then break end
    table.insert(merged, lists[best][at[best]])
    at[best] = at[best] + 1
  end
  offered = merged
end
local claimed, served = {}, {}  -- served[queue][lane]: the lanes this claim handed a job of
for _, f in ipairs(fair) do served[f.q] = {} end
for i = 1, math.min(limit, #offered) do
  local o = offered[i]
  local id = string.sub(o[2], 49)
  if o[4] then served[o[3]][o[4]] = true end
  redis.call('HINCRBY', jk(id), 'attempts', 1)
  redis.call('HSET', jk(id), 'worker', worker, 'claim', spec.token .. string.format('%08x', i), 'lease', lease_until)
  set_state(id, 'running', now)  -- takes the row out of the due set (and its lane)
  table.insert(claimed, {hmap(redis.call('HGETALL', jk(id))), hmap(redis.call('HGETALL', sk(id)))})
end
-- the lanes served go to the back of the rotation, in turn; one the claim emptied has left it already (XX)
for _, f in ipairs(fair) do
  for _, lane in ipairs(f.lanes) do
    if served[f.q][lane] then
      redis.call('ZADD', qk(f.q, 'turns'), 'XX', fmt(redis.call('INCR', T .. ':turn')), lane)
    end
  end
end
reap_done(num(now), tonumber(spec.done_ttl))
-- one JSON document, not nested arrays: the client decodes one string instead of ~30 per row
return cjson.encode({claimed, exhausted})
"""

ACK = r"""
local now, bucket, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local missed = {}  -- the 0-based places of the acks that did not land (almost always none: a short answer)
for i = 4, #ARGV, 5 do
  local id, worker, claim, duration, bin = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  if owned(id, worker, claim) then
    set_state(id, 'done', now)
    count(redis.call('HGET', jk(id), 'name'), 'done', duration, bucket, true)
    count_wait(id, bin, bucket)
  else
    table.insert(missed, (i - 4) / 5)
  end
end
reap_done(num(now), ttl)
return missed
"""

NACK = r"""
local now, id, worker, claim = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local o = cjson.decode(ARGV[5])
if not owned(id, worker, claim) then return 0 end
if not o.count_attempt then
  local a = num(redis.call('HGET', jk(id), 'attempts'))
  if a > 0 then redis.call('HINCRBY', jk(id), 'attempts', -1) end
end
local run_at = opt(o.run_at)
if run_at then
  redis.call('HSET', jk(id), 'run_at', run_at)
elseif o.target == 'ready' then
  redis.call('HSET', jk(id), 'run_at', now)
end
if opt(o.error) then
  redis.call('HSET', jk(id), 'err', o.error)
  if opt(o.code) then redis.call('HSET', jk(id), 'code', o.code) else redis.call('HDEL', jk(id), 'code') end
end
set_state(id, o.target, now)
if opt(o.counter) then
  count(redis.call('HGET', jk(id), 'name'), o.counter, o.duration, o.bucket, true)
  count_wait(id, o.wait_bin, o.bucket)
end
if o.target == 'ready' and num(redis.call('HGET', jk(id), 'run_at')) <= num(now) then
  wake(redis.call('HGET', jk(id), 'queue'))
end
return 1
"""

HEARTBEAT = r"""
local until_ms = ARGV[1]
local renewed = {}
for i = 2, #ARGV, 3 do
  local id = ARGV[i]
  if owned(id, ARGV[i + 1], ARGV[i + 2]) then
    redis.call('HSET', jk(id), 'lease', until_ms)
    refile(id)
    table.insert(renewed, id)
  end
end
return renewed
"""

SAVE_STEP = r"""
if not owned(ARGV[1], ARGV[2], ARGV[3]) then return 0 end
redis.call('HSET', sk(ARGV[1]), ARGV[4], ARGV[5])
return 1
"""

RECORD_PROGRESS = r"""
if not owned(ARGV[1], ARGV[2], ARGV[3]) then return 0 end
redis.call('HSET', jk(ARGV[1]), 'progress', ARGV[4])
return 1
"""

STATS = r"""
local now = ARGV[1]
local out = {}
local queues = redis.call('SMEMBERS', T .. ':queues')
table.sort(queues)
for _, q in ipairs(queues) do
  local c = redis.call('HMGET', T .. ':counts', 'ready:' .. q, 'delayed:' .. q, 'running:' .. q,
    'suspended:' .. q, 'dead:' .. q)
  local total = 0
  for i = 1, 5 do c[i] = c[i] or '0'; total = total + num(c[i]) end
  if total > 0 then
    local oldest = redis.call('ZRANGEBYSCORE', qk(q, 'ready'), '-inf', now, 'WITHSCORES', 'LIMIT', 0, 1)
    local paused = redis.call('SISMEMBER', T .. ':paused:queues', q)
    table.insert(out, {q, c[1], c[2], c[3], c[4], c[5], oldest[2] or '', paused})
  end
end
return out
"""

PURGE = r"""
local limit = tonumber(ARGV[1])
local cut = cjson.decode(ARGV[2])
local highest = nil
for _, v in pairs(cut) do if not highest or num(v) > highest then highest = num(v) end end
if not highest then return 0 end
local gone, offset = 0, 0
while gone < limit do
  local batch = redis.call('ZRANGEBYSCORE', T .. ':finished', '-inf', '(' .. fmt(highest), 'WITHSCORES',
    'LIMIT', offset, 500)
  if #batch == 0 then break end
  for i = 1, #batch, 2 do
    local id = batch[i]
    local state = redis.call('HGET', jk(id), 'state')
    if gone < limit and state and cut[state] and num(batch[i + 1]) < num(cut[state]) then
      delete(id)
      gone = gone + 1
    else
      offset = offset + 1
    end
  end
end
return gone
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
