"""The README's "Async jobs" example, run as it is written: its job module (the section's first Python
block) with two names swapped — the payment API's URL for a receiver on 127.0.0.1, ``myapp.models`` for
the demo shop's ``Order`` (the same fields) — enqueued and run on Postgres by ``run_jobs``: the httpx POST
is sent once, the order is marked paid through the async ORM under the run's org, the one-day sleep
suspends the run, and the replay after it answers the charge from storage."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from demo_project.shop.models import Order
from tests.conftest import AnyJobsEnv, installed
from tests.readme import blocks, section
from tests.webhook_receiver import Receiver, Reply, running_receiver
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.testing import FrozenClock, run_jobs

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

PAYMENTS_URL = "https://payments.example/v1/charges"
MODELS_IMPORT = "from myapp.models import Order"


@pytest.fixture
def pg() -> Iterator[AnyJobsEnv]:
    clock = FrozenClock()
    with installed(clock, PostgresDriver(clock=clock)) as env:
        yield env


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as server:
        yield server


def readme_job_module(url: str) -> dict[str, Any]:
    """The README's async job module, executed with the receiver's URL and the demo's ``Order``."""
    source = next(b for b in blocks(section("Async jobs")) if b.lang == "python").body
    assert source.startswith("# myapp/jobs.py\n"), source
    assert source.count(PAYMENTS_URL) == 1 and source.count(MODELS_IMPORT) == 1, "the README's example changed"
    source = source.replace(PAYMENTS_URL, url).replace(MODELS_IMPORT, "from demo_project.shop.models import Order")
    namespace: dict[str, Any] = {"__name__": "readme_async_jobs"}
    exec(compile(source, "README.md (Async jobs)", "exec"), namespace)
    return namespace


def test_the_readme_async_job_posts_once_marks_the_order_paid_and_sleeps(pg: AnyJobsEnv, receiver: Receiver) -> None:
    charge_order = readme_job_module(receiver.url)["charge_order"]
    assert charge_order.is_async
    Order.objects.create(org_id="org-1", number="o-1", total_cents=4250)
    receiver.reply(Reply(body=b'{"id": "ch_1", "status": "succeeded"}'))

    queued = charge_order.enqueue({"org_id": "org-1", "order_id": "o-1", "amount_cents": 4250})
    report = run_jobs(pg.driver, clock=pg.clock)

    assert [e.outcome for e in report.executions] == ["suspended", "completed"]  # the sleep, then the rest
    assert report.last(queued.id).result == "ch_1"  # type: ignore[union-attr]
    (sent,) = receiver.requests  # the replay answered the charge from storage
    assert json.loads(sent.body) == {"order": "o-1", "amount_cents": 4250}
    assert sent.headers["idempotency-key"] == "charge:o-1"
    assert Order.objects.get(number="o-1").status == "paid"
