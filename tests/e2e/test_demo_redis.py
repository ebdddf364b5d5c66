"""``ULTIMATE_JOBS_DRIVER=redis make demo``: the demo shop runs on the Redis driver and ends exactly as it
does on Postgres — the same jobs, states, attempts and outcomes, the same orders."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connections
from django.test import override_settings

from tests.e2e.test_demo import shop_orders, table_rows
from tests.redis_db import redis_test_url

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

REDIS_URL = redis_test_url()  # this process's own database (tests.redis_db): flushed here


def run_demo(django_db_blocker: Any, **jobs: str) -> tuple[str, list[Any]]:
    out = StringIO()
    with django_db_blocker.unblock(), override_settings(ULTIMATE_JOBS={"REDIS_URL": REDIS_URL, **jobs}):
        call_command("shop_demo", stdout=out)
        orders = shop_orders()
        call_command("flush", verbosity=0, interactive=False)
        connections.close_all()  # no session left open for a later test's tenant scope to write to
    return out.getvalue(), orders


def test_the_demo_on_redis_ends_as_it_does_on_postgres(django_db_setup: None, django_db_blocker: Any) -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    on_redis, redis_orders = run_demo(django_db_blocker, DRIVER="redis")
    assert client.dbsize() > 0 and all(k.startswith(b"{demo}:") for k in client.keys("*"))
    client.flushdb()
    client.close()
    on_postgres, postgres_orders = run_demo(django_db_blocker, DRIVER="postgres")

    assert on_redis.startswith("ultimate_jobs demo shop: Redis driver")
    assert on_postgres.startswith("ultimate_jobs demo shop: Postgres driver")

    def outcomes(output: str) -> list[tuple[str, ...]]:
        return [(r["job"], r["state"], r["attempts"], r["outcomes"]) for r in table_rows(output)]

    assert outcomes(on_redis) == outcomes(on_postgres)
    assert redis_orders == postgres_orders
    for line in ("relay: published 1 row after the COMMIT", "stranded orders now paid: 3 of 3", "fired by hand"):
        assert line in on_redis, on_redis
