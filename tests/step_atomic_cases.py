"""``run.step.atomic(name, fn)``: ``fn``'s writes and the step's checkpoint commit in one transaction on the
jobs' database. Not collected here: tests/postgres/test_step_atomic.py runs these on Postgres and
tests/sqlite/test_step_atomic_sqlite.py on SQLite (each directory's ``any_jobs``); the refusal on a driver
whose jobs live elsewhere is tests/unit/test_steps.py's (memory) and tests/redis/test_redis_specific.py's.
The effect each body writes is an auth ``Group`` row (a unique name), read back with the ORM.

A lease lost while the step is open is each driver module's own case (Postgres: the claim goes through
and the late commit fails; SQLite: the claim waits on the write lock). A worker killed between the body's
write and the commit is tests/e2e/test_postgres_processes.py's; the chaos suite's transactional variant
counts doubled effects under SIGKILLs and a Postgres crash; tests/security/test_cross_org_work.py runs
the tenant guard and row-level security inside the step."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.contrib.auth.models import Group
from django.db import connections

from tests.conftest import AnyJobsEnv
from ultimate_jobs import JobRun, job
from ultimate_jobs.contracts.operator import JobFilter
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


def test_a_worker_paused_past_its_lease_before_the_step_cannot_commit_it(any_jobs: AnyJobsEnv) -> None:
    """The lease lapses before the step's transaction opens and another worker claims the job: the late
    worker's function still runs, but its checkpoint cannot land (the fence names the new claim), so its
    write rolls back with it and the new owner runs the step from scratch."""
    driver, clock = any_jobs.driver, any_jobs.clock
    taken: list[Any] = []

    def mark_paid(run: JobRun[Any]) -> str:
        Group.objects.create(name=f"order-7:attempt-{run.attempt}")
        return f"paid on attempt {run.attempt}"

    def body(run: JobRun[Any]) -> str:
        if run.attempt == 1:  # paused past its lease: another worker takes the job over
            clock.advance(driver.visibility_timeout_ms + 1)
            taken.extend(on_another_thread(lambda: steal(any_jobs)).jobs)
        answer: str = run.step.atomic("mark-paid", lambda: mark_paid(run))
        return answer

    queued = declare("pay_after_a_pause", body).enqueue({"k": 1})
    run_jobs(clock=clock, advance=False)
    assert_taken_over(any_jobs, queued.id, taken)
    assert_the_new_owner_counts(any_jobs, queued.id, "order-7")


def steal(env: AnyJobsEnv) -> Any:
    """Another worker's claim on the default queue (from its own thread and connection)."""
    return env.driver.claim(queues=["default"], limit=1, worker_id="thief")


def assert_taken_over(env: AnyJobsEnv, job_id: str, taken: list[Any]) -> None:
    """The thief holds the job, found no checkpoint, and the late worker left neither write nor checkpoint."""
    assert [j.id for j in taken] == [job_id]
    assert taken[0].steps == ()  # the new owner found no checkpoint
    stolen = row(env, job_id)
    assert (stolen.state, stolen.worker_id, stolen.attempts) == ("running", "thief", 2)
    assert groups() == [] and steps(env, job_id) == {}  # the late worker's write and checkpoint: gone


def assert_the_new_owner_counts(env: AnyJobsEnv, job_id: str, order: str) -> None:
    """The thief never settles; once its lease lapses in turn, the next attempt runs the step once."""
    env.clock.advance(env.driver.visibility_timeout_ms + 1)
    run_jobs(clock=env.clock)
    assert row(env, job_id).state == "done"
    assert groups() == [f"{order}:attempt-3"]
    assert steps(env, job_id)["mark-paid"].output == "paid on attempt 3"


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
