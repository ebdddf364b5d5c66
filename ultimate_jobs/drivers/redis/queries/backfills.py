"""The Lua behind the Redis driver's backfill ledger (``driver.backfills``)."""

from __future__ import annotations

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
