r"""The Lua behind the Redis driver's job list and count (``driver.operator.list``, ``.count``).

A list sorted by creation walks ``T:all`` (or the state's set, ``stk(state)``), scored by creation: equal
scores keep byte order of their ids, the tie-break :mod:`~ultimate_jobs.contracts.ordering` asks for. Every
other order sorts the window the SQL drivers sort — the newest ``COUNT_CAP`` matching rows, read by one walk
of the same set — so no write keeps an index for it. ``ARGV[1]`` is the filter as one JSON document (``f``):
its fields, ``col`` and ``desc`` (the order), ``fin`` (finished rows only), and a cursor ``after`` or ``before`` as
``[value, created, id]`` (value ``''`` sorted by creation).
"""

from __future__ import annotations

# The filter a list and a count share: match(id, field) answers the row's HMGET — queue, name, state, tenant,
# key, created, finished, then `field` — when the row exists and every term of f holds, else false.
_FILTER = r"""
local f = cjson.decode(ARGV[1])
local function match(id, field)
  local h = redis.call('HMGET', jk(id), 'queue', 'name', 'state', 'tenant', 'key', 'created', 'finished', field)
  if not h[1] then return false end
  if opt(f.queue) and h[1] ~= f.queue then return false end
  if opt(f.name) and h[2] ~= f.name then return false end
  if opt(f.state) and h[3] ~= f.state then return false end
  if opt(f.tenant) and h[4] ~= f.tenant then return false end
  if opt(f.key) and h[5] ~= f.key then return false end
  if opt(f.prefix) and string.sub(id, 1, #f.prefix) ~= f.prefix then return false end
  if opt(f.suffix) and string.sub(id, -#f.suffix) ~= f.suffix then return false end
  if opt(f.from) and num(h[6]) < num(f.from) then return false end
  if opt(f.to) and num(h[6]) >= num(f.to) then return false end
  if f.fin and not h[7] then return false end
  return h
end
"""

# LIST — one page of the rows f matches in f's order: {'ok', rows (each its HGETALL), cut}. Sorted by
# creation, it walks T:all (or the state's set) by score from the cursor, every matching row in order. Sorted
# by another column, it sorts a window: the ARGV[2] newest rows f matches (one walk of the same set, newest
# first, so a page reads at most ARGV[2] rows however many the store holds), keyed as value, creation, id in
# byte order (numbers fixed width, OFF making negatives sort; text ended by a NUL, so a name sorts before every
# longer name it starts), past the cursor's key. cut is 1 when more rows match than the window holds. A page
# before its cursor walks the other way and is turned back.
LIST = (
    _FILTER
    + r"""
local limit, col, window = tonumber(f.limit), f.col, tonumber(ARGV[2])
local back = opt(f.before) ~= nil
local c = opt(f.after) or opt(f.before)
local down = f.desc ~= back  -- the walk's direction: the list's, or its opposite for a page before the cursor
local step = math.max(limit, 100)  -- entries read per call: a page's worth at least, so a filter costs few calls
local out, cut = {}, 0
local idx = T .. ':all'
if opt(f.state) then idx = stk(f.state) end
local lo, hi = '-inf', '+inf'
if opt(f.from) then lo = f.from end
if opt(f.to) then hi = '(' .. f.to end

-- creation order: the score range of the set, the cursor's instant its bound
local function walk_created()
  local cc, ci = nil, nil
  if c then
    cc, ci = num(c[2]), c[3]
    if down and (not opt(f.to) or cc < num(f.to)) then hi = c[2] end
    if not down and (not opt(f.from) or cc > num(f.from)) then lo = c[2] end
  end
  local offset = 0
  while #out < limit do
    local batch
    if down then
      batch = redis.call('ZREVRANGEBYSCORE', idx, hi, lo, 'WITHSCORES', 'LIMIT', offset, step)
    else
      batch = redis.call('ZRANGEBYSCORE', idx, lo, hi, 'WITHSCORES', 'LIMIT', offset, step)
    end
    if #batch == 0 then break end
    offset = offset + #batch / 2
    for i = 1, #batch, 2 do
      local id, score = batch[i], num(batch[i + 1])
      -- past the cursor: an instant beyond it, or its instant and an id beyond its id
      local past = not cc or (down and (score < cc or blt(id, ci))) or (not down and (score > cc or blt(ci, id)))
      if past and #out < limit and match(id, 'created') then table.insert(out, id) end
    end
  end
end

-- a row's key in a sorted order: its value, creation and id, comparable as bytes
local function fixed(v) return string.format('%016d', num(v) + OFF) end
local function key_of(v, created, id)
  if col == 'name' or col == 'queue' then return v .. '\0' .. fixed(created) .. id end
  return fixed(v) .. fixed(created) .. id
end

-- any other order: the window's rows, newest first, keyed and sorted here
local function sort_window()
  if f.fin and opt(f.state) and LIVE[f.state] then return end  -- a live row has no finish
  local keyed, ids, offset = {}, {}, 0
  while #keyed <= window do
    local batch = redis.call('ZREVRANGEBYSCORE', idx, hi, lo, 'LIMIT', offset, 500)
    if #batch == 0 then break end
    offset = offset + #batch
    for _, id in ipairs(batch) do
      local h = #keyed <= window and match(id, col)
      if h and h[8] then
        local k = key_of(h[8], h[6], id)
        table.insert(keyed, k)
        ids[k] = id
      end
    end
  end
  if #keyed > window then  -- the oldest one read is past the window: it only says more rows match
    cut = 1
    table.remove(keyed)
  end
  local cm = nil
  if c then cm = key_of(c[1], c[2], c[3]) end
  local past = {}
  for _, k in ipairs(keyed) do
    if not cm or (down and blt(k, cm)) or (not down and blt(cm, k)) then table.insert(past, k) end
  end
  if down then table.sort(past, function(a, b) return blt(b, a) end) else table.sort(past, blt) end
  for i = 1, math.min(limit, #past) do table.insert(out, ids[past[i]]) end
end

if col == 'created' then walk_created() else sort_window() end
if back then
  local rev = {}
  for i = #out, 1, -1 do table.insert(rev, out[i]) end
  out = rev
end
local rows = {}
for _, id in ipairs(out) do table.insert(rows, redis.call('HGETALL', jk(id))) end
return {'ok', rows, cut}
"""
)

# COUNT — how many rows f matches (sorted by finish, finished rows only): {rows, basis}, basis as
# contracts/ordering.py's JobCount ('' and '' for "not counted"). ARGV[2] is COUNT_CAP, ARGV[3] the sample's
# draws, ARGV[4] the sample's seed (the caller's: a script draws nothing itself). Exact from T:counts when f
# names only a queue (with a state, or finished rows); else the smallest candidate set that holds every
# match — a state's set or T:all in f's creation range, T:finished — is exact
# by its size when it answers every term of f, counted entry by entry when it holds at most COUNT_CAP, and
# else sampled: ARGV[3] entries drawn at random ranks, the matches scaled to its size. A sample that matches
# nothing estimates nothing (a filter rarer than the sample can see): not counted.
COUNT = (
    _FILTER
    + r"""
local cap, draws, seed = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
-- every state a row can be in, as T:counts' fields name them
local STATES = {'ready', 'delayed', 'running', 'suspended', 'done', 'failed', 'dead', 'cancelled'}
if f.fin and opt(f.state) and LIVE[f.state] then return {0, 'count'} end  -- a live row has no finish
local terms = {}
for _, t in ipairs({'queue', 'name', 'state', 'tenant', 'key', 'prefix', 'suffix', 'from', 'to', 'fin'}) do
  if opt(f[t]) then terms[t] = true end
end
local function within(covers)
  for t in pairs(terms) do if not covers[t] then return false end end
  return true
end

if opt(f.queue) and within({queue = true, state = true, fin = true}) then
  local n = 0
  for _, st in ipairs(STATES) do
    if (not opt(f.state) or st == f.state) and not (f.fin and LIVE[st]) then
      n = n + num(redis.call('HGET', T .. ':counts', st .. ':' .. f.queue) or '0')
    end
  end
  return {n, 'count'}
end

-- the candidate sets: {key, first rank, size, the column its entries are of, the terms it answers}
local sets = {}
local scored = T .. ':all'
if opt(f.state) then scored = stk(f.state) end
local lo, hi, r0 = '-inf', '+inf', 0
if opt(f.from) then lo, r0 = f.from, redis.call('ZCOUNT', scored, '-inf', '(' .. f.from) end
if opt(f.to) then hi = '(' .. f.to end
table.insert(sets, {scored, r0, redis.call('ZCOUNT', scored, lo, hi),
  {state = true, from = true, to = true, fin = opt(f.state) ~= nil}})
if f.fin then table.insert(sets, {T .. ':finished', 0, redis.call('ZCARD', T .. ':finished'), {fin = true}}) end
local best = sets[1]
for _, set in ipairs(sets) do if set[3] < best[3] then best = set end end
local key, first, size = best[1], best[2], best[3]
if size == 0 or within(best[4]) then return {size, 'count'} end

if size <= cap then
  local n = 0
  for at = first, first + size - 1, 500 do
    for _, m in ipairs(redis.call('ZRANGE', key, at, math.min(at + 499, first + size - 1))) do
      if match(m, 'created') then n = n + 1 end
    end
  end
  return {n, 'count'}
end

local s = seed
local hits = 0
for _ = 1, draws do
  s = (s * 16807) % 2147483647  -- Park-Miller: exact in a double, a rank uniform enough for an estimate
  local m = redis.call('ZRANGE', key, first + s % size, first + s % size)[1]
  if m and match(m, 'created') then hits = hits + 1 end
end
if hits == 0 then return {'', ''} end
return {math.floor(hits * size / draws + 0.5), 'sample'}
"""
)
