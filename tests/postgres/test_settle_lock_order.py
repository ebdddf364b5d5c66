"""A worker's batched settle and its heartbeat touch overlapping rows at once (hundreds of async runs in
flight: the settle buffer acks a batch while the heartbeat renews every lease). Both statements lock their
rows in id order before they change one, so two of them over the same rows, in any order, never deadlock.

Before that, an ack batch and a renewal in different orders deadlocked under the async io bench (Postgres
aborts one: the ack failed, the leases lapsed and the jobs ran again)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from ultimate_jobs.contracts.jobs import Ack, Heartbeat
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.runtime.dbconn import close_thread_connections
from ultimate_jobs.testing import FrozenClock
from ultimate_jobs.testing.conformance_support import QUEUE, request

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ROWS = 200
ROUNDS = 40
VT_MS = 60_000


def in_threads(*work: Callable[[], Any]) -> list[BaseException]:
    """Run each callable on a thread of its own (its own connection), all at once; answer what they raised."""
    errors: list[BaseException] = []
    start = threading.Barrier(len(work))

    def run(fn: Callable[[], Any]) -> None:
        try:
            start.wait()
            fn()
        except BaseException as exc:
            errors.append(exc)
        finally:
            close_thread_connections()

    threads = [threading.Thread(target=run, args=(fn,)) for fn in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return errors


def test_renewals_and_a_batched_settle_over_the_same_rows_in_opposite_orders_never_deadlock() -> None:
    driver = PostgresDriver(clock=FrozenClock())
    driver.enqueue_many([request() for _ in range(ROWS)])
    claimed = driver.claim(queues=[QUEUE], limit=ROWS, worker_id="w1", visibility_timeout_ms=VT_MS).jobs
    assert len(claimed) == ROWS
    beats = [Heartbeat(job_id=j.id, ref=j.ref) for j in claimed]

    def renew(order: list[Heartbeat]) -> Callable[[], None]:
        def rounds() -> None:
            for _ in range(ROUNDS):
                assert len(driver.heartbeat(order, visibility_timeout_ms=VT_MS)) == ROWS

        return rounds

    assert in_threads(renew(beats), renew(beats[::-1]), renew(beats[::2] + beats[1::2])) == []

    acks = [Ack(job_id=j.id, ref=j.ref, duration_ms=1) for j in claimed]
    landed: list[frozenset[str]] = []
    errors = in_threads(
        lambda: landed.append(driver.ack_many(acks[::-1])),
        lambda: driver.heartbeat(beats, visibility_timeout_ms=VT_MS),
    )
    assert errors == []
    assert landed == [frozenset(j.id for j in claimed)]


def test_a_batched_settle_lands_its_claimed_ids_and_refuses_what_names_no_claimed_row() -> None:
    driver = PostgresDriver(clock=FrozenClock())
    driver.enqueue_many([request() for _ in range(3)])
    first, second, third = driver.claim(queues=[QUEUE], limit=3, worker_id="w1", visibility_timeout_ms=VT_MS).jobs
    acks = [
        Ack(first.id, first.ref, 5),  # as Postgres prints it: lands
        Ack(second.id.upper(), second.ref, 5),  # the same row in another spelling: lands under its canonical id
        Ack("not-a-uuid", third.ref, 5),  # names no row: nothing is sent for it
        Ack(third.id, first.ref, 5),  # a real row under another claim's fence: refused
    ]
    assert driver.ack_many(acks) == frozenset({first.id, second.id})
    operator = driver.operator
    assert operator is not None
    assert [getattr(operator.get(j.id), "state", None) for j in (first, second, third)] == ["done", "done", "running"]
