r"""The Lua behind the Redis driver's job list and count (``driver.operator.list``, ``.count``) and the build
of the order indexes they walk.

A list sorted by creation walks ``T:all`` (or the state's set, ``stk(state)``), scored by creation: equal
scores keep byte order of their ids, the tie-break :mod:`~ultimate_jobs.drivers.ordering` asks for. Every
other order walks its column's lexicographic index, ``ixk(col)`` (the prelude's member format: value,
creation, id), with ZRANGEBYLEX from the cursor's member — a page reads the entries it shows and those the
filters skip, never the rest. ``ARGV[1]`` is the filter as one JSON document (``f``): its fields, ``col``
and ``desc`` (the order), ``fin`` (finished rows only), and a cursor ``after`` or ``before`` as
``[value, created, id]`` (value ``''`` sorted by creation).
"""

from __future__ import annotations

# The filter a list and a count share: match(id, field) answers the row's HMGET — queue, name, state, tenant,
# key, created, finished, then `field` — when the row exists and every term of f holds, else false; member_id
# reads a row's id off an entry of ixk(col), or of a set of ids (col 'id': T:all, a state's set, T:finished).
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
local function member_id(col, m)
  if col == 'id' then return m end
  if TEXT[col] then return string.sub(m, string.find(m, '\0', 1, true) + 17) end
  return string.sub(m, 33)
end
"""

# LIST — one page of the rows f matches in f's order: {'ok', rows (each its HGETALL)}, or {'unindexed'} when
# the order needs the column indexes and the store is not marked as built with version ARGV[2] (the driver
# builds them, INDEX_BUILD, and asks again). A page after its cursor walks the list's direction from the
# cursor's key, exclusive; a page before it walks the other way and is turned back. An index entry whose
# row no longer makes it (a row gone, a value written by a script that did not move its entry) is skipped.
# Filtered by a state of at most FEW_IN_STATE rows, a sorted list reads that state's rows, not the index.
LIST = (
    _FILTER
    + r"""
local limit, col = tonumber(f.limit), f.col
if col ~= 'created' and redis.call('GET', T .. ':ix:version') ~= ARGV[2] then return {'unindexed'} end
local back = opt(f.before) ~= nil
local c = opt(f.after) or opt(f.before)
local down = f.desc ~= back  -- the walk's direction: the list's, or its opposite for a page before the cursor
local step = math.max(limit, 100)  -- entries read per call: a page's worth at least, so a filter costs few calls
local FEW_IN_STATE = 1000  -- a state with at most this many rows is sorted whole, not found in a column's index
local out = {}

-- creation order: the score range of T:all (or the state's set), the cursor's instant its bound
local function walk_created()
  local idx = T .. ':all'
  if opt(f.state) then idx = stk(f.state) end
  local lo, hi = '-inf', '+inf'
  if opt(f.from) then lo = f.from end
  if opt(f.to) then hi = '(' .. f.to end
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

-- a state's rows are few (at most FEW_IN_STATE): sorted here by their entries, past the cursor's, rather than
-- found by walking an index that holds every other state's rows too (the ready rows among a million done)
local function sort_state(cm)
  local keyed = {}
  for _, id in ipairs(redis.call('ZRANGE', stk(f.state), 0, -1)) do
    local h = match(id, col)
    if h and h[8] then
      local m = ixm(col, h[8], h[6], id)
      if not cm or (down and blt(m, cm)) or (not down and blt(cm, m)) then table.insert(keyed, m) end
    end
  end
  if down then table.sort(keyed, function(a, b) return blt(b, a) end) else table.sort(keyed, blt) end
  for i = 1, math.min(limit, #keyed) do table.insert(out, member_id(col, keyed[i])) end
end

-- any other order: the column's index by byte order, from the cursor's entry (a filter naming the sorted
-- name or queue narrows the walk to that value's entries)
local function walk_index()
  if f.fin and opt(f.state) and LIVE[f.state] then return end  -- a live row has no finish
  local cm = nil
  if c then cm = ixm(col, c[1], c[2], c[3]) end
  if opt(f.state) and redis.call('ZCARD', stk(f.state)) <= FEW_IN_STATE then return sort_state(cm) end
  local key = ixk(col)
  local lo, hi = '-', '+'
  local pin = nil
  if col == 'name' then pin = opt(f.name) elseif col == 'queue' then pin = opt(f.queue) end
  if pin then lo, hi = '[' .. pin .. '\0', '(' .. pin .. '\1' end
  if cm then
    if down and (hi == '+' or blt(cm, string.sub(hi, 2))) then hi = '(' .. cm end
    if not down and (lo == '-' or blt(string.sub(lo, 2), cm)) then lo = '(' .. cm end
  end
  while #out < limit do
    local got
    if down then
      got = redis.call('ZREVRANGEBYLEX', key, hi, lo, 'LIMIT', 0, step)
    else
      got = redis.call('ZRANGEBYLEX', key, lo, hi, 'LIMIT', 0, step)
    end
    for _, m in ipairs(got) do
      local id = member_id(col, m)
      local h = #out < limit and match(id, col)
      if h and h[8] and ixm(col, h[8], h[6], id) == m then table.insert(out, id) end
    end
    if #got < step then break end
    if down then hi = '(' .. got[#got] else lo = '(' .. got[#got] end
  end
end

if col == 'created' then walk_created() else walk_index() end
if back then
  local rev = {}
  for i = #out, 1, -1 do table.insert(rev, out[i]) end
  out = rev
end
local rows = {}
for _, id in ipairs(out) do table.insert(rows, redis.call('HGETALL', jk(id))) end
return {'ok', rows}
"""
)

# COUNT — how many rows f matches (sorted by finish, finished rows only): {rows, basis}, basis as
# drivers/ordering.py's JobCount ('' and '' for "not counted"). ARGV[2] is COUNT_CAP, ARGV[3] the sample's
# draws, ARGV[4] the sample's seed (the caller's: a script draws nothing itself), ARGV[5] the order indexes'
# version (their name and queue ranges are candidates once built). Exact from T:counts when f names only a
# queue (with a state, or finished rows); else the smallest candidate set that holds every match — a state's
# set or T:all in f's creation range, T:finished, one name's or one queue's range of its index — is exact
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
table.insert(sets, {scored, r0, redis.call('ZCOUNT', scored, lo, hi), 'id',
  {state = true, from = true, to = true, fin = opt(f.state) ~= nil}})
if f.fin then table.insert(sets, {T .. ':finished', 0, redis.call('ZCARD', T .. ':finished'), 'id', {fin = true}}) end
if redis.call('GET', T .. ':ix:version') == ARGV[5] then
  for _, col in ipairs({'name', 'queue'}) do
    local v = opt(f[col])
    if v then
      local key = ixk(col)
      local size = redis.call('ZLEXCOUNT', key, '[' .. v .. '\0', '(' .. v .. '\1')
      table.insert(sets, {key, redis.call('ZLEXCOUNT', key, '-', '(' .. v .. '\0'), size, col, {[col] = true}})
    end
  end
end
local best = sets[1]
for _, set in ipairs(sets) do if set[3] < best[3] then best = set end end
local key, first, size, col = best[1], best[2], best[3], best[4]
if size == 0 or within(best[5]) then return {size, 'count'} end

if size <= cap then
  local n = 0
  for at = first, first + size - 1, 500 do
    for _, m in ipairs(redis.call('ZRANGE', key, at, math.min(at + 499, first + size - 1))) do
      if match(member_id(col, m), 'created') then n = n + 1 end
    end
  end
  return {n, 'count'}
end

local s = seed
local hits = 0
for _ = 1, draws do
  s = (s * 16807) % 2147483647  -- Park-Miller: exact in a double, a rank uniform enough for an estimate
  local m = redis.call('ZRANGE', key, first + s % size, first + s % size)[1]
  if m and match(member_id(col, m), 'created') then hits = hits + 1 end
end
if hits == 0 then return {'', ''} end
return {math.floor(hits * size / draws + 0.5), 'sample'}
"""
)

# INDEX_BUILD — add the column index entries of the rows of a store written before the indexes existed, at
# most ARGV[2] rows a call, walking T:all in creation order from the cursor ARGV[3], ARGV[4] (the score and id
# of the last row the previous call indexed; '' to start). Answers {'more', rows, score, id} to be called
# again, or {'done', rows} once T:all is walked — marking the store built with version ARGV[1]. The cursor
# is a key, not a rank, so rows deleted between calls move nothing; rows inserted meanwhile index themselves,
# and adding an entry a row already has changes nothing.
INDEX_BUILD = r"""
local version, batch, after_score, after_id = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local all = T .. ':all'
if redis.call('GET', T .. ':ix:version') == version then return {'done', 0} end
local rank = 0
if after_score ~= '' then rank = redis.call('ZCOUNT', all, '-inf', '(' .. after_score) end
local indexed = 0
while indexed < batch do
  local got = redis.call('ZRANGE', all, rank, rank + batch - 1, 'WITHSCORES')
  if #got == 0 then
    redis.call('SET', T .. ':ix:version', version)
    return {'done', indexed}
  end
  rank = rank + #got / 2
  for i = 1, #got, 2 do
    local id, score = got[i], got[i + 1]
    if after_score == '' or num(score) > num(after_score) or blt(after_id, id) then
      local v = ix_values(id)
      if v.created then index_add(id, v) end
      indexed = indexed + 1
      after_score, after_id = score, id
    end
  end
end
return {'more', indexed, after_score, after_id}
"""
