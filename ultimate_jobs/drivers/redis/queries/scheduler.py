"""The Lua behind the Redis driver's scheduler storage: the leader lease (``driver.leader``) and the counter
rollup its leader owes (``driver.rollup_counters()``, or riding on the lease), and the watermarks and
one-script fire (``driver.scheduler_state``) — a fire's job rows land in the same script as its watermark."""

from __future__ import annotations

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

ROLLUP = r"""
return fold_counters(num(ARGV[1]))
"""

# The queues' depth samples (x_job_queue_samples): fields 'bucket:queue', values 'depth:age' (age '' when no
# row was due); ARGV[2] is a JSON list of [bucket, queue, depth, age or null]; the most of each is kept, and
# fields before ARGV[1] (a week back) go.
SAMPLE_QUEUES = r"""
local k = T .. ':samples'
for _, s in ipairs(cjson.decode(ARGV[2])) do
  local f = fmt(s[1]) .. ':' .. s[2]
  local depth, age = num(s[3]), nil
  if s[4] ~= cjson.null then age = num(s[4]) end
  local old = redis.call('HGET', k, f)
  if old then
    local od, oa = string.match(old, '^(%d+):(.*)$')
    depth = math.max(depth, num(od))
    if oa ~= '' then age = math.max(age or 0, num(oa)) end
  end
  local a = ''
  if age then a = fmt(age) end
  redis.call('HSET', k, f, fmt(depth) .. ':' .. a)
end
for _, f in ipairs(redis.call('HKEYS', k)) do
  if num(string.match(f, '^(%-?%d+):')) < num(ARGV[1]) then redis.call('HDEL', k, f) end
end
return 1
"""

LEADER_RELEASE = r"""
local k = T .. ':leader:' .. ARGV[1]
if redis.call('HGET', k, 'holder') ~= ARGV[2] then return 0 end
redis.call('DEL', k)
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
