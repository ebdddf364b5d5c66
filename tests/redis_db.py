"""The Redis database a test process owns on the shared server, leased for the process's lifetime.

Two runs of the suite on one machine (each with its own ``ULTIMATE_JOBS_TEST_DB``) share the Redis server
on 127.0.0.1:6379, and the Redis tests ``FLUSHDB`` the database they use; a number fixed per pytest-xdist
worker (it was 5 + the worker's index) had one run flush the other's keys. A key prefix per run would not
cover what the tests touch: the processes build their driver from settings (the default prefix), the demo's
store has a prefix of its own, the bodies write a list of their own, and the idle-worker test counts every
command a database receives (``MONITOR``). So each test process takes a whole database, exclusively:

- the lease is the name of a connection the process holds open (``CLIENT SETNAME
  ultimate_jobs-test:db<N>:<run>:<worker>:<pid>``, the run being ``ULTIMATE_JOBS_TEST_DB``). It ends when
  the process ends, however it ends: no expiry to renew, nothing left behind by a killed run;
- a claim reads ``CLIENT LIST`` and names its connection under a short lock (``SET NX PX`` in database 0),
  so two processes never take the same database; the first one tried is hashed from (run, worker), so a
  process tends to find the database it had last time;
- the pool is every database but 0 (an application's default, and the lock's) and 15 (the bench's,
  ``BENCH_REDIS_URL``): 14 on a default server, room for four runs of three workers at once. A process
  that finds none free waits (bounded) for one, rather than share.

Every ``FLUSHDB`` in the suite is on a database leased this way (or on a server a test started itself).
"""

from __future__ import annotations

import functools
import os
import re
import time
import uuid
import zlib

import redis

HOST = os.environ.get("ULTIMATE_JOBS_TEST_REDIS_HOST", "127.0.0.1")
PORT = int(os.environ.get("ULTIMATE_JOBS_TEST_REDIS_PORT", "6379"))
RESERVED = frozenset({0, 15})  # an application's default database (and the lock's); the bench's
LEASE_NAME = re.compile(r"^ultimate_jobs-test:db(\d+):")
LOCK_KEY = "ultimate_jobs-test:redis-db-claim"
LOCK_MS = 30_000  # far longer than a claim (two commands), so it only bounds a claimer that died holding it
CLAIM_WAIT_S = 600.0  # a full pool waits this long for a run to end (a leg takes minutes) before failing
POLL_S = 0.2
_UNLOCK = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"

_held: list[redis.Connection] = []  # the lease: closed only when the process exits


def redis_test_url() -> str:
    """``redis://`` for the database this process owns (see :func:`redis_test_db`)."""
    return f"redis://{HOST}:{PORT}/{redis_test_db()}"


@functools.cache
def redis_test_db() -> int:
    """The Redis database this process owns until it exits, claimed on the first call; tests may
    ``FLUSHDB`` it. Fails after ``CLAIM_WAIT_S`` when every database of the pool stays leased."""
    run = re.sub(r"[^\w.-]", "_", os.environ.get("ULTIMATE_JOBS_TEST_DB", "ultimate_jobs"))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    client = redis.Redis(host=HOST, port=PORT, db=0, decode_responses=True)
    try:
        databases = int(client.config_get("databases").get("databases", 16))
        pool = [n for n in range(databases) if n not in RESERVED]
        start = zlib.crc32(f"{run}:{worker}".encode()) % len(pool)
        preferred = pool[start:] + pool[:start]
        deadline = time.monotonic() + CLAIM_WAIT_S
        while True:
            holders = _claim(client, preferred, f"{run}:{worker}:{os.getpid()}")
            if isinstance(holders, int):
                return holders
            if time.monotonic() >= deadline:
                raise RuntimeError(
                    f"no Redis database free for the tests on {HOST}:{PORT} after {CLAIM_WAIT_S:g}s; "
                    f"held by: {', '.join(sorted(holders))} — wait for those runs to end, or run fewer "
                    "pytest-xdist workers (-n)"
                )
            time.sleep(POLL_S)
    finally:
        client.close()


def _claim(client: redis.Redis, preferred: list[int], owner: str) -> int | list[str]:
    """Under the lock, lease the first database of ``preferred`` no live connection holds; the number,
    or the names of the leases that fill the pool."""
    token = uuid.uuid4().hex
    while not client.set(LOCK_KEY, token, nx=True, px=LOCK_MS):
        time.sleep(0.01)  # another process is between its CLIENT LIST and its SETNAME: two commands
    try:
        leases = {c["name"]: m for c in client.client_list() if (m := LEASE_NAME.match(c.get("name") or ""))}
        taken = {int(m[1]) for m in leases.values()}
        free = [n for n in preferred if n not in taken]
        if not free:
            return list(leases)
        lease = redis.Connection(host=HOST, port=PORT, client_name=f"ultimate_jobs-test:db{free[0]}:{owner}")
        lease.connect()  # sends CLIENT SETNAME: the lease is visible to the next claimer's CLIENT LIST
        _held.append(lease)
        return free[0]
    finally:
        client.eval(_UNLOCK, 1, LOCK_KEY, token)
