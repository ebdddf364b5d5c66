"""A shop's queues as an operator finds them, for the admin tests (client and browser): a payment that
died at its capture step after three attempts, receipts sent, inventory syncs waiting (one late), a
paused exports queue, a live worker and a nightly task.

>>> scenario = build_scenario(env)
>>> scenario.dead_id                      # the dead letter to retry
>>> scenario.gateway["up"] = True         # the next attempt's capture succeeds
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pydantic
import pytest
from pydantic import SecretStr

from tests.conftest import AnyJobsEnv, Env, installed
from ultimate_jobs import JobRun, job, operator, task
from ultimate_jobs.contracts.operator import WorkerInfo
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.drivers.postgres.wake import start_queue_wake
from ultimate_jobs.testing import FrozenClock, run_jobs

CARD_TOKEN = "tok_live_4242-secret"
MINUTE = 60_000


class ChargeOrder(pydantic.BaseModel):
    org_id: str
    order_id: int
    amount_cents: int
    card_token: SecretStr


class GatewayDown(RuntimeError):
    """The payment gateway refused the capture."""


@dataclass
class Scenario:
    """The ids a test acts on, and the switch that lets the next capture through."""

    dead_id: str
    done_id: str
    ready_id: str
    delayed_id: str
    gateway: dict[str, bool] = field(default_factory=lambda: {"up": False})
    calls: dict[str, int] = field(default_factory=dict)
    handles: dict[str, Any] = field(default_factory=dict)


@contextmanager
def postgres_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Env[PostgresDriver]]:
    """A frozen clock and a ``PostgresDriver`` installed process-wide — the admin's pages and the live
    server's thread read through it (the rows must be committed: ``transactional_db``)."""
    monkeypatch.setattr(
        "ultimate_jobs.drivers.postgres.driver.start_queue_wake", partial(start_queue_wake, read_timeout_ms=20)
    )
    clock = FrozenClock()
    with installed(clock, PostgresDriver(clock=clock)) as env:
        yield env


def build_scenario(env: AnyJobsEnv | Env[PostgresDriver]) -> Scenario:
    """The shop's queues, on whichever driver ``env`` installed (the memory driver or Postgres)."""
    gateway = {"up": False}
    calls: dict[str, int] = {}

    def count(step: str, value: Any, took_ms: int = 0) -> Any:
        calls[step] = calls.get(step, 0) + 1
        env.clock.advance(took_ms)  # the step's work, on the frozen clock
        return value

    @job(
        name="charge_order",
        input=ChargeOrder,
        queue="payments",
        tenant=lambda i: i.org_id,
        idempotency_key=lambda i: f"order:{i.order_id}",
        retry={"attempts": 3, "delay": "30s", "jitter": False},
    )
    def charge_order(run: JobRun[ChargeOrder]) -> dict[str, str]:
        run.step.run("reserve_stock", lambda: count("reserve_stock", {"reserved": 2, "warehouse": "ams-1"}, 140))
        auth = run.step.run("authorize", lambda: count("authorize", {"authorization": "AUTH-7731"}, 870))
        run.progress(2, 3, note="capturing the payment")

        def capture() -> dict[str, str]:
            count("capture", None, 2_400)
            if not gateway["up"]:
                raise GatewayDown(
                    f"gateway 503 while capturing {auth['authorization']} (upstream timeout; card {CARD_TOKEN})"
                )
            return {"capture": "CAP-1", "status": "settled"}

        return run.step.run("capture", capture)

    @job(name="send_receipt", queue="emails", tenant="none", idempotency_key=lambda i: f"receipt:{i['order']}")
    def send_receipt(run: JobRun[dict[str, Any]]) -> None:
        run.step.run("render", lambda: count("render", {"template": "receipt.html"}, 35))
        run.step.run(
            "deliver", lambda: count("deliver", {"provider": "smtp", "id": f"<{run.input['order']}@shop>"}, 610)
        )

    @job(name="sync_stock_levels", queue="inventory", tenant="none", idempotency_key=lambda i: f"sync:{i['sku']}")
    def sync_stock_levels(run: JobRun[dict[str, Any]]) -> None:
        return None

    @job(name="export_orders", queue="exports", tenant="none", idempotency_key=lambda i: f"export:{i['day']}")
    def export_orders(run: JobRun[dict[str, Any]]) -> None:
        return None

    @task(name="nightly_report", cron="0 3 * * *", tz="Europe/Paris")
    def nightly_report(occurrence_ms: int) -> list[tuple[Any, dict[str, Any]]]:
        return [(export_orders, {"day": occurrence_ms})]

    dead = charge_order.enqueue({"org_id": "acme", "order_id": 1042, "amount_cents": 4999, "card_token": CARD_TOKEN})
    done = send_receipt.enqueue({"order": 1041})
    send_receipt.enqueue({"order": 1040})
    run_jobs(env.driver, clock=env.clock, queues=["payments", "emails"])

    env.clock.advance(2 * MINUTE)
    delayed = sync_stock_levels.enqueue({"sku": "SKU-9"}, delay="2h")
    ready = sync_stock_levels.enqueue({"sku": "SKU-1"})
    sync_stock_levels.enqueue({"sku": "SKU-2"})
    export_orders.enqueue({"day": "2026-01-01"})
    operator.pause_queue("exports")
    env.clock.advance(7 * MINUTE)  # the oldest inventory sync has waited 7 minutes: late
    now = env.clock.now_ms()
    env.driver.record_worker(
        WorkerInfo(
            id="web-1:4711:3f9a",
            host="web-1",
            pid=4711,
            started_at_ms=now - 95 * MINUTE,
            queues=("payments", "emails", "default"),
            slots=8,
            in_flight=(done.id,),
            heartbeat_at_ms=now - 4_000,
        )
    )
    return Scenario(
        dead_id=dead.id,
        done_id=done.id,
        ready_id=ready.id,
        delayed_id=delayed.id,
        gateway=gateway,
        calls=calls,
        handles={"charge_order": charge_order, "send_receipt": send_receipt, "nightly_report": nightly_report},
    )
