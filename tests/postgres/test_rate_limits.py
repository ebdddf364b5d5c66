"""``@job(rate_limit=..., rate_key=...)``: starts held to a rate across the fleet, run by ``run_jobs`` on the
memory and the Postgres driver (``any_jobs``; tests/sqlite/test_rate_limits_sqlite.py runs them on SQLite),
on the frozen clock — so every start's instant is exact — and the refusals of a bad declaration or key; on
wall time, a Postgres take that waited for its key's row lock.

The fleet-wide accuracy under three real worker processes is bench/'s ``rates`` case and
tests/e2e/test_postgres_processes.py's (three worker processes under one limit)."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from django.db import connection, transaction

from tests.conftest import AnyJobsEnv
from ultimate_jobs import JobRun, RateLimit, SystemClock, job
from ultimate_jobs.contracts.operator import JobFilter
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.runtime.dbconn import close_thread_connections
from ultimate_jobs.testing import run_jobs


def starts_of(env: AnyJobsEnv, name: str, rate: Any, **options: Any) -> tuple[Any, list[tuple[str, int, int]]]:
    """A job ``name`` under ``rate`` whose body records (its org, the instant it started, its attempt)."""
    started: list[tuple[str, int, int]] = []

    def body(run: JobRun[Any]) -> None:
        started.append((run.input["org"], env.clock.now_ms(), run.attempt))

    handle = job(
        name=name,
        idempotency_key=lambda i: f"{name}:{i['n']}",
        tenant=lambda i: i["org"],
        rate_limit=rate,
        **options,
    )(body)
    return handle, started


def gaps(instants: list[int]) -> list[int]:
    return [b - a for a, b in itertools.pairwise(sorted(instants))]


def test_starts_are_spaced_by_the_rate_and_the_waits_are_not_attempts(any_jobs: AnyJobsEnv) -> None:
    handle, started = starts_of(any_jobs, "sync_ledger", "2/s")
    for n in range(6):
        handle.enqueue({"n": n, "org": "org-a"})
    run_jobs(clock=any_jobs.clock)
    assert len(started) == 6
    assert min(gaps([at for _, at, _ in started])) >= 500  # 2 a second: one start per 500 ms
    assert {attempt for *_, attempt in started} == {1}  # a run handed back to its instant spent no attempt
    assert any_jobs.driver.operator is not None
    assert {r.state for r in any_jobs.driver.operator.list(JobFilter(name="sync_ledger")).rows} == {"done"}


def test_a_rate_key_gives_each_org_its_own_schedule(any_jobs: AnyJobsEnv) -> None:
    handle, started = starts_of(any_jobs, "call_crm", "1/s", rate_key=lambda i: i["org"])
    for n in range(3):
        handle.enqueue({"n": n, "org": "org-a"})
        handle.enqueue({"n": 10 + n, "org": "org-b"})
    run_jobs(clock=any_jobs.clock)
    for org in ("org-a", "org-b"):
        assert min(gaps([at for o, at, _ in started if o == org])) >= 1_000
    first = min(at for _, at, _ in started)
    assert sorted(o for o, at, _ in started if at == first) == ["org-a", "org-b"]  # side by side, not in turn


def test_a_shared_rate_limit_holds_every_job_naming_it(any_jobs: AnyJobsEnv) -> None:
    payments_api = RateLimit("payments-api", "4/s")
    charge, charged = starts_of(any_jobs, "charge", payments_api)
    refund, refunded = starts_of(any_jobs, "refund", payments_api)
    for n in range(3):
        charge.enqueue({"n": n, "org": "org-a"})
        refund.enqueue({"n": n, "org": "org-a"})
    run_jobs(clock=any_jobs.clock)
    assert min(gaps([at for _, at, _ in charged + refunded])) >= 250  # one schedule for the two jobs
    assert any_jobs.driver.rates is not None
    assert [s.key for s in any_jobs.driver.rates.state()] == ["payments-api"]


# -- bad input: refused at the declaration or the enqueue, nothing stored --------------------------------


@pytest.mark.parametrize("rate", ["ten per second", "0/s", "-5/s", "10/fortnight", "5000/s", 10, ""])
def test_a_rate_that_says_no_rate_is_refused_at_the_declaration(any_jobs: AnyJobsEnv, rate: Any) -> None:
    with pytest.raises(UltimateError) as refused:
        starts_of(any_jobs, "never_declared", rate)
    assert refused.value.code == "X_JOB_RATE_LIMIT_INVALID"
    assert "never_declared" in refused.value.message


def test_a_rate_key_that_is_no_function_is_refused(any_jobs: AnyJobsEnv) -> None:
    with pytest.raises(UltimateError) as refused:
        starts_of(any_jobs, "keyed_wrong", "1/s", rate_key="org")
    assert refused.value.code == "X_JOB_RATE_LIMIT_INVALID" and "must be a function" in refused.value.message


def test_a_rate_key_without_a_rate_limit_is_refused(any_jobs: AnyJobsEnv) -> None:
    with pytest.raises(UltimateError) as refused:
        starts_of(any_jobs, "key_only", None, rate_key=lambda i: i["org"])
    assert refused.value.code == "X_JOB_RATE_LIMIT_INVALID" and "rate_limit=" in refused.value.message


@pytest.mark.parametrize(
    ("key", "says"),
    [
        (lambda i: i["account"], "raised KeyError"),
        (lambda i: "", "answered ''"),
        (lambda i: 42, "answered '42'"),
    ],
)
def test_a_rate_key_that_raises_or_answers_no_key_is_refused_at_the_enqueue(
    any_jobs: AnyJobsEnv, key: Callable[[Any], Any], says: str
) -> None:
    handle, _ = starts_of(any_jobs, "keyed_badly", "1/s", rate_key=key)
    with pytest.raises(UltimateError) as refused:
        handle.enqueue({"n": 1, "org": "org-a"})
    assert refused.value.code == "X_JOB_RATE_KEY_INVALID" and says in refused.value.message
    assert any_jobs.driver.operator is not None
    assert not any_jobs.driver.operator.list(JobFilter(name="keyed_badly")).rows


def test_an_async_rate_key_is_refused_at_the_declaration(any_jobs: AnyJobsEnv) -> None:
    async def org(i: Any) -> str:
        return str(i["org"])

    with pytest.raises(UltimateError) as refused:
        starts_of(any_jobs, "keyed_async", "1/s", rate_key=org)
    assert refused.value.code == "X_JOB_ASYNC_UNSUPPORTED"


def test_a_rate_key_that_raises_at_the_run_fails_the_attempt_with_its_code(any_jobs: AnyJobsEnv) -> None:
    """A row written past the enqueue's check (an older release's input, a hand-made request): its run's
    rate key raises, and the attempt fails with X_JOB_RATE_KEY_INVALID (terminal) instead of crashing."""
    handle, started = starts_of(any_jobs, "keyed_at_run", "1/s", rate_key=lambda i: i["account"])
    request = handle.build_request({"n": 1, "org": "org-a", "account": "acct-1"})
    queued = any_jobs.driver.enqueue(replace(request, input={"n": 1, "org": "org-a"}))  # no account any more
    run_jobs(clock=any_jobs.clock)
    assert any_jobs.driver.operator is not None
    found = any_jobs.driver.operator.get(queued.id)
    assert found is not None and (found.state, found.attempts, found.last_code) == ("dead", 1, "X_JOB_RATE_KEY_INVALID")
    assert started == []


@pytest.mark.django_db(transaction=True)
def test_a_postgres_take_queued_on_the_keys_row_lock_hands_out_no_instant_that_passed_while_it_waited() -> None:
    """On wall time, a take whose statement waited for the key's row lock (other takers, or here a session
    holding it) decides the key's instant once it holds the lock: the free instant that passed meanwhile is not
    handed out — the run would start late, closer to the next start than the interval — and the answer still
    counts from the caller's ``now_ms``, so the caller waits out exactly to the instant stored."""
    driver = PostgresDriver(clock=SystemClock())
    rates = driver.rates
    assert rates is not None
    assert rates.take("api", "job-1", interval_ms=20, now_ms=driver.clock.now_ms()) == 0  # next free: +20 ms
    answered: list[tuple[int, int]] = []

    def take() -> None:
        try:
            asked = driver.clock.now_ms()
            answered.append((asked, rates.take("api", "job-2", interval_ms=20, now_ms=asked, near_ms=250)))
        finally:
            close_thread_connections()

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM x_job_rates WHERE key = 'api' FOR UPDATE")
        taker = threading.Thread(target=take)
        taker.start()
        waiting = False
        for _ in range(2_000):  # until the take's statement is queued on the row lock
            cursor.execute("SELECT pg_stat_clear_snapshot()")  # else this transaction sees its first reading
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND query LIKE '%%x_job_rate_holds%%'"
            )
            if waiting := cursor.fetchone()[0] == 1:
                break
            time.sleep(0.005)
        assert waiting
        time.sleep(0.3)  # the lock held 300 ms more: the key's instant (+20 ms) passes meanwhile
    taker.join(30)
    assert len(answered) == 1
    asked, wait = answered[0]
    assert wait >= 300  # decided once it held the lock, not the +20 ms instant that passed
    with connection.cursor() as cursor:
        cursor.execute("SELECT next_at_ms FROM x_job_rates WHERE key = 'api'")
        assert cursor.fetchone()[0] == asked + wait + 20  # the instant answered is the one the schedule moved past
