"""``run.step.atomic(name, fn)``: ``fn``'s writes and the step's checkpoint commit in one transaction on the
jobs' database. Not collected here: tests/postgres/test_step_atomic.py runs these on Postgres and
tests/sqlite/test_step_atomic_sqlite.py on SQLite (each directory's ``any_jobs``); the refusal on a driver
whose jobs live elsewhere is tests/unit/test_step_atomic_refusal.py's (memory) and tests/redis'. The effect
each body writes is an auth ``Group`` row (a unique name), read back with the ORM.

A worker killed between the body's write and the commit is tests/e2e/test_postgres_processes.py's; the
chaos suite's transactional variant counts doubled effects under SIGKILLs and a Postgres crash."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.contrib.auth.models import Group
from django.db import connections

from tests.conftest import AnyJobsEnv
from ultimate_jobs import JobRun, job
from ultimate_jobs.drivers.records import JobFilter
from ultimate_jobs.testing import run_jobs

WAIT = 5.0  # the bound on a cross-thread wait; a passing test never spends it


def on_another_thread(fn: Callable[[], Any]) -> Any:
    """``fn`` on a thread of its own — its own database connection, outside the step's transaction —
    answered here once it returned."""
    answer: list[Any] = []

    def run() -> None:
        try:
            answer.append(fn())
        except BaseException as exc:  # reported to the test thread, which fails on it
            answer.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(WAIT)
    assert not thread.is_alive() and answer, "the other thread never finished"
    if isinstance(answer[0], BaseException):
        raise answer[0]
    return answer[0]


def row(env: AnyJobsEnv, job_id: str) -> Any:
    assert env.driver.operator is not None
    found = env.driver.operator.get(job_id)
    assert found is not None
    return found


def steps(env: AnyJobsEnv, job_id: str) -> dict[str, Any]:
    assert env.driver.operator is not None
    return {s.name: s for s in env.driver.operator.steps(job_id)}


def groups() -> list[str]:
    return sorted(Group.objects.values_list("name", flat=True))


def declare(name: str, body: Callable[[JobRun[Any]], Any], **options: Any) -> Any:
    options.setdefault("retry", {"attempts": 3, "delay": 0})
    return job(name=name, idempotency_key=lambda i: f"{name}:{i['k']}", tenant="none", **options)(body)


# -- the promise -------------------------------------------------------------------------------


def test_a_later_attempt_replays_the_step_and_its_write_stays_single(any_jobs: AnyJobsEnv) -> None:
    calls: list[int] = []

    def mark_paid() -> int:
        calls.append(1)
        return int(Group.objects.create(name="order-1:paid").pk)

    def body(run: JobRun[Any]) -> int:
        pk: int = run.step.atomic("mark-paid", mark_paid)
        if run.attempt == 1:
            raise RuntimeError("the receipt failed after the order was marked paid")
        return pk

    queued = declare("pay", body).enqueue({"k": 1})
    run_jobs(clock=any_jobs.clock)

    assert row(any_jobs, queued.id).state == "done"
    assert (len(calls), groups()) == (1, ["order-1:paid"])  # attempt 2 replayed the checkpoint
    saved = steps(any_jobs, queued.id)["mark-paid"]
    assert (saved.status, saved.output) == ("done", Group.objects.get().pk)


def test_an_error_in_the_function_rolls_its_writes_back_and_the_step_runs_again(any_jobs: AnyJobsEnv) -> None:
    calls: list[int] = []

    def mark_paid(run: JobRun[Any]) -> str:
        calls.append(run.attempt)
        Group.objects.create(name="order-2:paid")
        if run.attempt == 1:
            raise RuntimeError("the ledger write failed after the order row was written")
        return "paid"

    queued = declare("pay_twice", lambda run: run.step.atomic("mark-paid", lambda: mark_paid(run))).enqueue({"k": 1})
    run_jobs(clock=any_jobs.clock)

    assert row(any_jobs, queued.id).state == "done"
    assert calls == [1, 2]
    assert groups() == ["order-2:paid"]  # attempt 1's row rolled back with its failed step


def test_an_enqueue_inside_the_step_commits_with_it(any_jobs: AnyJobsEnv) -> None:
    receipts: list[str] = []
    receipt = declare("receipt", lambda run: receipts.append(run.input["k"]))

    def mark_paid(run: JobRun[Any]) -> None:
        Group.objects.create(name="order-3:paid")
        receipt.enqueue({"k": f"order-3/attempt-{run.attempt}"})
        if run.attempt == 1:
            raise RuntimeError("failed after the enqueue")

    queued = declare("pay_and_notify", lambda run: run.step.atomic("mark-paid", lambda: mark_paid(run))).enqueue(
        {"k": 1}
    )
    run_jobs(clock=any_jobs.clock)

    assert row(any_jobs, queued.id).state == "done"
    assert receipts == ["order-3/attempt-2"]  # attempt 1's enqueue rolled back with its step
    assert any_jobs.driver.operator is not None
    assert len(any_jobs.driver.operator.list(JobFilter(name="receipt")).rows) == 1


def test_a_step_timeout_rolls_the_transaction_back(any_jobs: AnyJobsEnv) -> None:
    def slow_write(run: JobRun[Any]) -> None:
        Group.objects.create(name=f"order-4:attempt-{run.attempt}")
        if run.attempt == 1:
            any_jobs.clock.advance(2_000)  # past the step's ceiling while it holds its write

    handle = declare("pay_slowly", lambda run: run.step.atomic("mark-paid", lambda: slow_write(run)), step_timeout="1s")
    queued = handle.enqueue({"k": 1})
    run_jobs(clock=any_jobs.clock)

    assert row(any_jobs, queued.id).state == "done"
    assert row(any_jobs, queued.id).attempts == 2
    assert groups() == ["order-4:attempt-2"]


def test_a_worker_that_lost_the_claim_cannot_commit_and_the_new_owners_run_counts(any_jobs: AnyJobsEnv) -> None:
    """The lease lapses while the step runs and another worker claims the job: the first worker's
    checkpoint cannot land, so its write rolls back with it; the new owner runs the step from scratch."""
    driver, clock = any_jobs.driver, any_jobs.clock
    taken: list[Any] = []

    def mark_paid(run: JobRun[Any]) -> str:
        if run.attempt == 1:  # paused past its lease: another worker takes the job over
            clock.advance(driver.visibility_timeout_ms + 1)
            claim = on_another_thread(lambda: driver.claim(queues=["default"], limit=1, worker_id="thief"))
            taken.extend(claim.jobs)
        Group.objects.create(name=f"order-5:attempt-{run.attempt}")
        return f"paid on attempt {run.attempt}"

    handle = declare("pay_late", lambda run: run.step.atomic("mark-paid", lambda: mark_paid(run)))
    queued = handle.enqueue({"k": 1})
    run_jobs(clock=clock, advance=False)

    assert [j.id for j in taken] == [queued.id]
    assert taken[0].steps == ()  # the new owner found no checkpoint
    stolen = row(any_jobs, queued.id)
    assert (stolen.state, stolen.worker_id, stolen.attempts) == ("running", "thief", 2)
    assert groups() == [] and steps(any_jobs, queued.id) == {}  # the late worker's write and checkpoint: gone

    clock.advance(driver.visibility_timeout_ms + 1)  # the thief never settles: its lease lapses in turn
    run_jobs(clock=clock)
    assert row(any_jobs, queued.id).state == "done"
    assert groups() == ["order-5:attempt-3"]
    assert steps(any_jobs, queued.id)["mark-paid"].output == "paid on attempt 3"


def test_an_async_body_awaits_the_same_step(any_jobs: AnyJobsEnv) -> None:
    calls: list[int] = []

    def mark_paid() -> int:
        calls.append(1)
        return int(Group.objects.create(name="order-6:paid").pk)

    async def body(run: JobRun[Any]) -> int:
        pk: int = await run.step.atomic("mark-paid", mark_paid)
        if run.attempt == 1:
            raise RuntimeError("failed after the step")
        return pk

    queued = declare("pay_async", body).enqueue({"k": 1})
    run_jobs(clock=any_jobs.clock)

    assert row(any_jobs, queued.id).state == "done"
    assert (len(calls), groups()) == (1, ["order-6:paid"])


# -- refusals ----------------------------------------------------------------------------------


def dead_with(env: AnyJobsEnv, job_id: str) -> tuple[str, int, str]:
    found = row(env, job_id)
    return found.state, found.attempts, found.last_code


def test_an_async_def_function_is_refused_on_attempt_one(any_jobs: AnyJobsEnv) -> None:
    async def mark_paid() -> None:
        await Group.objects.acreate(name="never")

    queued = declare("pay_with_async_fn", lambda run: run.step.atomic("mark-paid", mark_paid)).enqueue({"k": 1})
    run_jobs(clock=any_jobs.clock)
    assert dead_with(any_jobs, queued.id) == ("dead", 1, "X_STEP_ATOMIC_UNSUPPORTED")
    assert "plain def" in row(any_jobs, queued.id).last_error
    assert groups() == []


def test_another_database_alias_is_refused(any_jobs: AnyJobsEnv) -> None:
    def body(run: JobRun[Any]) -> None:
        run.step.atomic("mark-paid", lambda: Group.objects.using("reports").create(name="x"), using="reports")

    queued = declare("pay_elsewhere", body).enqueue({"k": 1})
    run_jobs(clock=any_jobs.clock)
    assert dead_with(any_jobs, queued.id) == ("dead", 1, "X_STEP_ATOMIC_UNSUPPORTED")
    assert "'reports'" in row(any_jobs, queued.id).last_error
