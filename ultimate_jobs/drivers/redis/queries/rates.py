r"""The Lua behind the Redis driver's rate schedules (``driver.rates``), in two sorted sets: ``T:rates``, each
rate key scored by its next free instant, and ``T:rate-holds``, each reservation — its key and holder joined
by ``\x1f`` (a holder, a job id, has none, so the key is all before the last one) — scored by its instant.
Scores are doubles, exact for instants below 2**53; forgetting is one range removal per set."""

from __future__ import annotations

# RATE_TAKE — one take of rate key ARGV[1] by ARGV[2] (a job id), a start every ARGV[3] ms, at ARGV[4], by a
# caller that waits up to ARGV[5] ms itself: drivers/rates.py's decide(), line for line. Answers the ms to wait
# for the instant it starts on, 0 for now.
RATE_TAKE = r"""
local key, holder, interval, now, near = ARGV[1], ARGV[2], num(ARGV[3]), num(ARGV[4]), num(ARGV[5])
local mine = key .. '\31' .. holder
local hold = num(redis.call('ZSCORE', T .. ':rate-holds', mine))
local next_at = num(redis.call('ZSCORE', T .. ':rates', key))
if hold and hold > now - interval then
  if hold - now > near then return hold - now end  -- back early: keep waiting for it
  redis.call('ZREM', T .. ':rate-holds', mine)  -- near or at its instant: spend it, start on it
  return math.max(0, hold - now)
end
local at = now
if next_at then at = math.max(next_at, now) end
redis.call('ZADD', T .. ':rates', fmt(at + interval), key)
if at - now > near then
  redis.call('ZADD', T .. ':rate-holds', fmt(at), mine)
else
  redis.call('ZREM', T .. ':rate-holds', mine)
end
return at - now
"""

# RATE_STATE — the first 1,000 rate keys in byte order, each {key, next free instant, reservations held}.
RATE_STATE = r"""
local flat = redis.call('ZRANGE', T .. ':rates', 0, -1, 'WITHSCORES')
local all = {}
for i = 1, #flat, 2 do table.insert(all, {flat[i], fmt(num(flat[i + 1])), 0}) end
table.sort(all, function(a, b) return blt(a[1], b[1]) end)
local rows, by_key = {}, {}
for i = 1, math.min(#all, 1000) do
  rows[i] = all[i]
  by_key[all[i][1]] = all[i]
end
for _, m in ipairs(redis.call('ZRANGE', T .. ':rate-holds', 0, -1)) do
  local row = by_key[string.match(m, '^(.*)\31')]  -- the key: all before the last separator
  if row then row[3] = row[3] + 1 end
end
return rows
"""

# RATE_FORGET — drop the schedules and reservations whose instant is before ARGV[1]; answers how many went.
RATE_FORGET = r"""
local before = '(' .. ARGV[1]
return redis.call('ZREMRANGEBYSCORE', T .. ':rates', '-inf', before)
  + redis.call('ZREMRANGEBYSCORE', T .. ':rate-holds', '-inf', before)
"""
