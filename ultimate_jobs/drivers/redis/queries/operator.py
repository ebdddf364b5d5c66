"""The Lua behind the Redis driver's operator actions (``driver.operator``): remove, requeue, cancel, promote,
the bulk forms and a queue's resume (its list and count are :mod:`.listing`'s)."""

from __future__ import annotations

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
