"""The Lua prepended to every script the Redis driver runs: key builders, state moves and the
operator's shared helpers (:data:`PRELUDE`, :data:`HELPERS`).

Every key a script touches is built from ``KEYS[1]``, the driver's hash tag (``{x}`` for prefix ``x``),
so all of a store's keys live in one Redis Cluster slot and each script runs atomically on the node
that owns it. Instants, tokens and ids come from the caller (the driver's clock, ``uuid4``); a script
never reads the server's time or draws a random number, so a replica replays exactly what ran.

Numbers are stored as the decimal text the caller sent, and scripts compare them with ``tonumber``
(exact below 2**53); a number a script writes is formatted with ``%d``, never ``tostring``.
"""

from __future__ import annotations

from ....contracts.series import COUNTER_TIERS, WAIT_EDGES_MS

_TIERS = ", ".join(f"{{{width}, {keep}}}" for width, keep in COUNTER_TIERS)
_EDGES = ", ".join(str(edge) for edge in WAIT_EDGES_MS)

PRELUDE = (
    r"""
local T = KEYS[1]
local OFF = 1000000000000000
local LIVE = {ready = true, delayed = true, running = true, suspended = true}
local WAITING = {ready = true, delayed = true, suspended = true}
local function jk(id) return T .. ':job:' .. id end
local function sk(id) return T .. ':steps:' .. id end
local function qk(q, kind) return T .. ':q:' .. kind .. ':' .. q end
local function stk(state) return T .. ':st:' .. state end
local function livekey(name, tenant, key) return cjson.encode({name, tenant or '', key}) end
local function num(v) return tonumber(v) end
local function fmt(n) return string.format('%d', n) end
local function hmap(flat)
  local t = {}
  for i = 1, #flat, 2 do t[flat[i]] = flat[i + 1] end
  return t
end
local function opt(v) if v == nil or v == cjson.null or v == false then return nil end return v end

local function wake(q)
  redis.call('XADD', T .. ':wake', 'MAXLEN', '~', '1000', '*', 'q', q)
end

-- fair queues: a due row stays in its queue's due set (so a claim that does not treat the queue as fair
-- still finds it) and is also filed in its lane, lanek(q, lane) (lane: the tenant, '' for none); the lanes
-- with due work wait in qk(q, 'turns'), scored by the turn (T:turn) they joined or were last served at.
-- A row's 'dm' field is its member of the due set, its 'dl' field the lane it is filed in.
local function lanek(q, lane) return T .. ':q:lane:' .. #q .. ':' .. q .. ':' .. lane end  -- #q: no name collides

local function file_lane(id, q, score, dm)
  local lane = redis.call('HGET', jk(id), 'tenant') or ''
  redis.call('ZADD', lanek(q, lane), score, dm)
  redis.call('HSET', jk(id), 'dl', lane)
  -- a lane that newly has due work joins the rotation at the back; one already waiting keeps its turn
  redis.call('ZADD', qk(q, 'turns'), 'NX', fmt(redis.call('INCR', T .. ':turn')), lane)
  return lane
end

-- a lane left with no due work leaves the rotation, so an idle org costs a fair claim nothing
local function unlane(q, lane, dm)
  redis.call('ZREM', lanek(q, lane), dm)
  if redis.call('EXISTS', lanek(q, lane)) == 0 then redis.call('ZREM', qk(q, 'turns'), lane) end
end

-- file a row where its state puts it: waiting rows by run time, running rows by lease expiry
local function refile(id)
  local h = redis.call('HMGET', jk(id), 'queue', 'state', 'run_at', 'lease', 'dm', 'dl')
  local q, st = h[1], h[2]
  redis.call('ZREM', qk(q, 'timed'), id)
  redis.call('ZREM', qk(q, 'leased'), id)
  redis.call('ZREM', qk(q, 'ready'), id)
  if h[5] then
    redis.call('ZREM', qk(q, 'due'), h[5])
    if h[6] then unlane(q, h[6], h[5]) end
    redis.call('HDEL', jk(id), 'dm', 'dl')
  end
  if WAITING[st] then
    redis.call('ZADD', qk(q, 'timed'), h[3], id)
    if st ~= 'suspended' then redis.call('ZADD', qk(q, 'ready'), h[3], id) end
  elseif st == 'running' and h[4] then
    redis.call('ZADD', qk(q, 'leased'), h[4], id)
  end
end

-- move a row into its queue's claim order: priority descending, run time, creation, insertion
local function order_of(id)
  local h = redis.call('HMGET', jk(id), 'prio', 'run_at', 'created', 'seq')
  return -num(h[1]), string.format('%016d%016d%016d', num(h[2]) + OFF, num(h[3]) + OFF, num(h[4])) .. id
end

local function push_due(id, q, fair)
  local score, dm = order_of(id)
  redis.call('ZADD', qk(q, 'due'), score, dm)
  redis.call('HSET', jk(id), 'dm', dm)
  if fair then file_lane(id, q, score, dm) end
end

local function set_state(id, new, now)
  local h = redis.call('HMGET', jk(id), 'state', 'queue', 'created')
  local old = h[1]
  if LIVE[old] ~= LIVE[new] then  -- the live key moves only when liveness changes
    local k = redis.call('HMGET', jk(id), 'name', 'tenant', 'key')
    local lk = livekey(k[1], k[2], k[3])
    if LIVE[old] then
      if redis.call('HGET', T .. ':live', lk) == id then redis.call('HDEL', T .. ':live', lk) end
    else
      redis.call('HSET', T .. ':live', lk, id)
    end
  end
  redis.call('HSET', jk(id), 'state', new, 'updated', now)
  if old ~= new then
    redis.call('HINCRBY', T .. ':counts', old .. ':' .. h[2], -1)
    redis.call('HINCRBY', T .. ':counts', new .. ':' .. h[2], 1)
    redis.call('ZREM', stk(old), id)
    redis.call('ZADD', stk(new), h[3], id)
  end
  if old == 'done' then redis.call('ZREM', T .. ':done', id) end
  -- a settled row keeps its last attempt's worker (until a claim or a reset replaces it), never its claim
  if new ~= 'running' and old == 'running' then redis.call('HDEL', jk(id), 'claim', 'lease') end
  if LIVE[new] then
    if not LIVE[old] then  -- a live row has no finish to clear
      redis.call('HDEL', jk(id), 'finished')
      redis.call('ZREM', T .. ':finished', id)
    end
  else
    redis.call('HSET', jk(id), 'finished', now)
    redis.call('ZADD', T .. ':finished', now, id)
    if new == 'done' then redis.call('ZADD', T .. ':done', now, id) end
  end
  refile(id)
end

local function delete(id)
  local h = redis.call('HMGET', jk(id), 'state', 'name', 'tenant', 'key', 'queue', 'dm', 'dl')
  if not h[1] then return end
  local lk = livekey(h[2], h[3], h[4])
  if redis.call('HGET', T .. ':live', lk) == id then redis.call('HDEL', T .. ':live', lk) end
  redis.call('HINCRBY', T .. ':counts', h[1] .. ':' .. h[5], -1)
  redis.call('ZREM', stk(h[1]), id)
  redis.call('ZREM', T .. ':all', id)
  redis.call('ZREM', T .. ':finished', id)
  redis.call('ZREM', T .. ':done', id)
  redis.call('ZREM', qk(h[5], 'timed'), id)
  redis.call('ZREM', qk(h[5], 'leased'), id)
  redis.call('ZREM', qk(h[5], 'ready'), id)
  if h[6] then redis.call('ZREM', qk(h[5], 'due'), h[6]) end
  if h[7] then unlane(h[5], h[7], h[6]) end
  redis.call('DEL', jk(id), sk(id))
end

local function owned(id, worker, claim)
  local h = redis.call('HMGET', jk(id), 'state', 'worker', 'claim')
  return h[1] == 'running' and h[2] == worker and h[3] == claim
end

-- the settle counters: fields 'width:start:index:job', index 0 done 1 retried 2 failed 3 dead 4 duration,
-- 5 + b the settles whose run time fell in bin b
local TIERS = {"""
    + _TIERS
    + r"""}
local CIDX = {done = 0, retried = 1, failed = 2, dead = 3}
-- the latency histogram's bin edges (WAIT_EDGES_MS): bin_of(ms) is wait_bin(ms)
local EDGES = {"""
    + _EDGES
    + r"""}
local function bin_of(ms)
  local b = 0
  for i, edge in ipairs(EDGES) do if num(ms) >= edge then b = i end end
  return b
end
-- a settle of a run that ran (timed) also counts its run time's bin, at index 5 + bin
local function count(job, outcome, duration, bucket, timed)
  local base = TIERS[1][1] .. ':' .. bucket .. ':'
  redis.call('HINCRBY', T .. ':counters', base .. CIDX[outcome] .. ':' .. job, 1)
  redis.call('HINCRBY', T .. ':counters', base .. '4:' .. job, duration)
  if timed then redis.call('HINCRBY', T .. ':counters', base .. (5 + bin_of(duration)) .. ':' .. job, 1) end
end

-- the queues' wait histograms (x_job_waits): fields 'width:start:bin:queue', bin as wait_bin() computes it
local function count_wait(id, bin, bucket)
  if bin == nil or bin == '' or bin == cjson.null then return end
  local queue = redis.call('HGET', jk(id), 'queue')
  redis.call('HINCRBY', T .. ':waits', TIERS[1][1] .. ':' .. bucket .. ':' .. bin .. ':' .. queue, 1)
end

-- fold one hash of 'width:start:index:name' fields through the tiers; answers the buckets taken out
local function fold_hash(key, now)
  local keep = {}
  for _, t in ipairs(TIERS) do keep[t[1]] = t[2] end
  local flat = redis.call('HGETALL', key)
  local expired = {}
  local buckets = 0
  for i = 1, #flat, 2 do
    local f = flat[i]
    local w, s, idx, job = string.match(f, '^(%d+):(%-?%d+):(%d+):(.*)$')
    local width, start = num(w), num(s)
    if start + width <= now - keep[width] then
      local bk = w .. ':' .. s .. ':' .. job
      if not expired[bk] then expired[bk] = true; buckets = buckets + 1 end
      redis.call('HDEL', key, f)
      for _, t in ipairs(TIERS) do
        local wider, wider_keep = t[1], t[2]
        if wider > width then
          local ws = start - (start % wider)
          if ws + wider > now - wider_keep then
            local into = fmt(wider) .. ':' .. fmt(ws) .. ':' .. idx .. ':' .. job
            redis.call('HINCRBY', key, into, flat[i + 1])
            break
          end
        end
      end
    end
  end
  return buckets
end

local function fold_counters(now)
  fold_hash(T .. ':waits', now)
  return fold_hash(T .. ':counters', now)
end

-- done rows past the retention window go, a few per call, so the store never keeps them forever
local function reap_done(now, ttl)
  if ttl <= 0 then return end
  local old = redis.call('ZRANGEBYSCORE', T .. ':done', '-inf', fmt(now - ttl), 'LIMIT', 0, 32)
  for _, id in ipairs(old) do delete(id) end
end

-- insert a batch all or nothing; answers {answers, due queues} or {false, refusal}
local function insert(reqs, now)
  local answers, fresh, fresh_keys, order = {}, {}, {}, {}
  for i, r in ipairs(reqs) do
    local rid = opt(r.id)
    local existing = nil
    if rid then
      local h = redis.call('HMGET', jk(rid), 'run_id', 'tenant')
      if h[1] then
        existing = {rid, h[1], h[2] or ''}
      elseif fresh[rid] then
        existing = {rid, fresh[rid].run_id, opt(fresh[rid].tenant) or ''}
      end
    end
    if existing then
      -- an id held under another tenant: refused, and nothing of that row is answered
      if existing[3] ~= (opt(r.tenant) or '') then return {false, {'id-taken', r.name, rid}} end
      answers[i] = {existing[1], existing[2], 1}
    else
      local lk = livekey(r.name, opt(r.tenant), r.key)
      local holder, holder_run = nil, nil
      if fresh_keys[lk] then
        holder, holder_run = fresh_keys[lk].id, fresh_keys[lk].run_id
      else
        holder = redis.call('HGET', T .. ':live', lk)
        if holder then holder_run = redis.call('HGET', jk(holder), 'run_id') end
      end
      if holder then
        if r.on_conflict == 'error' then return {false, {'dup', r.name, r.key, holder}} end
        answers[i] = {holder, holder_run, 1}
      else
        fresh[r.id] = r
        fresh_keys[lk] = r
        table.insert(order, r)
        answers[i] = {r.id, r.run_id, 0}
      end
    end
  end
  local due = {}
  for _, r in ipairs(order) do
    local run_at = opt(r.run_at) or now
    local state = 'ready'
    if num(run_at) > num(now) then state = 'delayed' end
    local seq = redis.call('INCR', T .. ':seq')
    local fields = {'id', r.id, 'run_id', r.run_id, 'name', r.name, 'queue', r.queue, 'key', r.key,
      'input', r.input, 'max', r.max, 'prio', r.prio, 'run_at', run_at, 'created', now, 'updated', now,
      'state', state, 'attempts', '0', 'seq', fmt(seq)}
    for _, f in ipairs({'tenant', 'by', 'tp', 'ck'}) do
      if opt(r[f]) then table.insert(fields, f); table.insert(fields, r[f]) end
    end
    redis.call('HSET', jk(r.id), unpack(fields))
    redis.call('HSET', T .. ':live', livekey(r.name, opt(r.tenant), r.key), r.id)
    redis.call('HINCRBY', T .. ':counts', state .. ':' .. r.queue, 1)
    redis.call('ZADD', stk(state), now, r.id)
    redis.call('ZADD', T .. ':all', now, r.id)
    redis.call('SADD', T .. ':queues', r.queue)
    refile(r.id)
    if state == 'ready' then due[r.queue] = true end
  end
  local queues = {}
  for q in pairs(due) do table.insert(queues, q) end
  table.sort(queues)
  return {answers, queues}
end
"""
)

# the helpers the operator, scheduler and ledger scripts share (byte order, a reset, bulk selection)
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
  redis.call('HDEL', jk(id), 'progress', 'worker')
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
