"""The admin's job pages on the Redis driver: every page renders from the Redis store, and a dead
letter retried from the admin runs again — the operator surface is the driver's, whichever it is."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.urls import reverse

from tests.admin_scenario import build_scenario
from tests.conftest import Env, installed
from tests.postgres.test_admin import PAGES, action, login, messages_of
from ultimate_jobs import operator
from ultimate_jobs.drivers.redis import RedisDriver
from ultimate_jobs.testing import FrozenClock, run_jobs

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def env(redis_client: redis.Redis) -> Iterator[Env[RedisDriver]]:
    clock = FrozenClock()
    with installed(clock, RedisDriver(redis_client, clock=clock)) as installed_env:
        yield installed_env


def test_every_admin_page_renders_from_redis_and_a_dead_letter_is_retried(env: Env[RedisDriver]) -> None:
    shop: Any = build_scenario(env)  # type: ignore[arg-type]  # only the driver protocol is used
    client = login(perms=("view", "change"))
    for page, name in PAGES.items():
        assert client.get(reverse(name)).status_code == 200, page
    listing = client.get(reverse(PAGES["dead letters"])).content.decode()
    assert shop.dead_id in listing and shop.done_id not in listing
    page = client.get(reverse("admin:ultimate_jobs_job_change", args=[shop.done_id])).content.decode()
    assert "send_receipt" in page and shop.done_id in page  # the job page reads the row from Redis

    shop.gateway["up"] = True
    assert messages_of(action(client, "dead letters", "retry", [shop.dead_id])) == [f"Retried 1 job: {shop.dead_id}"]
    assert operator.inspect_job(shop.dead_id).job.state == "ready"
    assert run_jobs(env.driver, clock=env.clock, queues=["payments"]).outcomes["completed"] == 1
    assert operator.inspect_job(shop.dead_id).job.state == "done"
