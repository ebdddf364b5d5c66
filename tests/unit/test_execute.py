"""One attempt → one JobExecution: every row of the outcome table, the deadline, retry-after, tenancy,
on_settled, the final-attempt burial and progress."""

from __future__ import annotations

import json
import logging
import random
import urllib.parse
from collections.abc import Callable
from typing import Any

import pydantic
import pytest

from tests.conftest import JobsEnv
from ultimate_jobs import CancelSignal, Concurrency, JobRun, execute_job, job, job_lease_key
from ultimate_jobs.contracts.jobs import LEASE_LAPSED_FINAL_ATTEMPT, ClaimedJob
from ultimate_jobs.contracts.series import CounterTotals
from ultimate_jobs.core import registry
from ultimate_jobs.core.definition import JobHandle
from ultimate_jobs.core.execute import AttemptEnv, JobExecution, Settled
from ultimate_jobs.core.scope import current_tenant
from ultimate_jobs.errors import JobDrainedError, UltimateError, register_error_retry
from ultimate_jobs.testing import run_jobs

NO_JITTER = {"attempts": 3, "delay": 1000, "jitter": False}


class AccountIn(pydantic.BaseModel):
    account: str
    org_id: str


def declare(fn: Callable[[JobRun[Any]], Any], **options: Any) -> JobHandle[Any, Any]:
    options.setdefault("idempotency_key", lambda i: "k")
    options.setdefault("tenant", "none")
    options.setdefault("retry", NO_JITTER)
    return job(**options)(fn)


def tenant_job(fn: Callable[[JobRun[Any]], Any], **options: Any) -> JobHandle[Any, Any]:
    options.setdefault("input", AccountIn)
    options.setdefault("idempotency_key", lambda i: f"sync:{i.account}")
    options.setdefault("tenant", lambda i: i.org_id)
    return declare(fn, **options)


def claim(env: JobsEnv, worker_id: str = "w1") -> ClaimedJob:
    claimed = env.driver.claim(queues=["default"], limit=1, worker_id=worker_id).jobs
    assert len(claimed) == 1
    return claimed[0]


def execute(env: JobsEnv, *, signal: CancelSignal | None = None, **options: Any) -> JobExecution:
    """Claim the one due row and run one attempt of it (``options``: more of the :class:`AttemptEnv`)."""
    attempt_env = AttemptEnv(driver=env.driver, clock=env.clock, rng=random.Random(0), **options)
    return execute_job(claim(env), attempt_env, signal=signal)


def row(env: JobsEnv, job_id: str) -> Any:
    record = env.driver.operator.get(job_id)
    assert record is not None
    return record


def counters(env: JobsEnv, name: str) -> tuple[int, int, int, int]:
    """``(done, retried, failed, dead)`` for one job."""
    for totals in env.driver.operator.counter_totals(0):
        if totals.job == name:
            return (totals.done, totals.retried, totals.failed, totals.dead)
    empty = CounterTotals(name)
    return (empty.done, empty.retried, empty.failed, empty.dead)


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == name]


class Told:
    """An on_settled hook that records what it was told (and the tenant it ran under)."""

    def __init__(self, fail_times: int = 0) -> None:
        self.settled: list[Settled] = []
        self.tenants: list[str | None] = []
        self.calls = 0
        self.fail_times = fail_times

    def __call__(self, settled: Settled) -> None:
        self.calls += 1
        if self.calls <= self.fail_times:
            raise RuntimeError(f"hook failure {self.calls}")
        self.settled.append(settled)
        self.tenants.append(current_tenant())

    @property
    def outcomes(self) -> list[str]:
        return [s.outcome for s in self.settled]


# -- the outcome table -------------------------------------------------------------------------


def test_completed(jobs: JobsEnv) -> None:
    handle = declare(lambda run: {"rows": 2}, name="completes")
    queued = handle.enqueue({})
    ex = execute(jobs)
    assert (ex.outcome, ex.landed, ex.result, ex.attempt, ex.final_attempt) == (
        "completed",
        True,
        {"rows": 2},
        1,
        False,
    )
    assert (ex.error, ex.code, ex.stop_reason) == (None, None, None)
    r = row(jobs, queued.id)
    assert (r.state, r.attempts) == ("done", 1)
    assert counters(jobs, "completes") == (1, 0, 0, 0)


def test_the_step_runner_is_built_once_when_the_body_first_reads_it(
    jobs: JobsEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ultimate_jobs.core import execute as execute_module
    from ultimate_jobs.core.steps import Step

    built: list[Step] = []

    class CountedStep(Step):
        def __init__(self, **options: Any) -> None:
            super().__init__(**options)
            built.append(self)

    monkeypatch.setattr(execute_module, "Step", CountedStep)
    declare(lambda run: None, name="no_steps").enqueue({})
    assert execute(jobs).outcome == "completed"
    assert built == []  # a body that takes no step pays for no step runner

    declare(lambda run: [run.step is run.step, run.step.run("one", lambda: 1)], name="one_step").enqueue({})
    ex = execute(jobs)
    assert (ex.outcome, ex.result) == ("completed", [True, 1])
    assert len(built) == 1  # one runner per attempt, however often the body reads run.step


def test_suspended_is_uncounted(jobs: JobsEnv) -> None:
    def sleeps(run: JobRun[Any]) -> None:
        run.step.sleep("1h")

    queued = declare(sleeps, name="suspends").enqueue({})
    ex = execute(jobs)
    assert ex.outcome == "suspended" and ex.landed
    assert ex.resume_at_ms == jobs.clock.now_ms() + 3_600_000
    r = row(jobs, queued.id)
    assert (r.state, r.attempts, r.run_at_ms) == ("suspended", 0, ex.resume_at_ms)
    assert counters(jobs, "suspends") == (0, 0, 0, 0)


def test_retried_is_counted_and_follows_the_backoff(jobs: JobsEnv) -> None:
    def throws(run: JobRun[Any]) -> None:
        raise ValueError("transient")

    queued = declare(throws, name="retries").enqueue({})
    now = jobs.clock.now_ms()
    ex = execute(jobs)
    assert (ex.outcome, ex.stop_reason, ex.code) == ("retried", None, None)
    assert isinstance(ex.error, ValueError)
    assert ex.resume_at_ms == now + 1000
    r = row(jobs, queued.id)
    assert (r.state, r.attempts, r.run_at_ms) == ("ready", 1, now + 1000)
    assert r.last_error is not None and r.last_error.startswith("ValueError: transient")
    assert counters(jobs, "retries") == (0, 1, 0, 0)
    jobs.clock.advance(1000)
    second = execute(jobs)
    assert second.outcome == "retried" and second.resume_at_ms == jobs.clock.now_ms() + 2000  # exponential


def test_dead_lettered_when_attempts_are_exhausted(jobs: JobsEnv) -> None:
    def throws(run: JobRun[Any]) -> None:
        raise ValueError("still broken")

    queued = declare(throws, name="exhausts", retry={"attempts": 2, "jitter": False}).enqueue({})
    report = run_jobs(clock=jobs.clock)
    assert [e.outcome for e in report.executions] == ["retried", "dead-lettered"]
    last = report.executions[-1]
    assert (last.stop_reason, last.final_attempt, last.attempt) == ("attempts-exhausted", True, 2)
    r = row(jobs, queued.id)
    assert (r.state, r.attempts) == ("dead", 2)
    assert "[attempts-exhausted] stopped on attempt 2 of 2" in r.last_error
    assert "X_JOB_MAX_ATTEMPTS" in r.last_error
    assert counters(jobs, "exhausts") == (0, 1, 0, 1)


@pytest.mark.parametrize("code", ["X_INVOICE_REJECTED", "X_VALIDATION"])
def test_a_terminal_code_dead_letters_on_the_attempt_it_happened(jobs: JobsEnv, retry_table: None, code: str) -> None:
    register_error_retry({"X_INVOICE_REJECTED": "terminal"})

    def rejects(run: JobRun[Any]) -> None:
        raise UltimateError(code, "the gateway refused the card")

    queued = declare(rejects, name="terminal", retry={"attempts": 5}).enqueue({})
    report = run_jobs(clock=jobs.clock)
    assert len(report.executions) == 1
    ex = report.executions[0]
    assert (ex.outcome, ex.stop_reason, ex.code, ex.attempt, ex.final_attempt) == (
        "dead-lettered",
        "terminal",
        code,
        1,
        False,
    )
    r = row(jobs, queued.id)
    assert (r.state, r.attempts, r.last_code) == ("dead", 1, code)
    assert r.last_error.startswith(f"{code}: the gateway refused the card")
    assert "[terminal] stopped on attempt 1 of 5" in r.last_error
    assert counters(jobs, "terminal") == (0, 0, 0, 1)


def test_dropped_when_dead_letter_is_off(jobs: JobsEnv) -> None:
    def throws(run: JobRun[Any]) -> None:
        raise ValueError("no")

    queued = declare(throws, name="drops", retry={"attempts": 1, "dead_letter": False}).enqueue({})
    ex = execute(jobs)
    assert (ex.outcome, ex.stop_reason) == ("dropped", "attempts-exhausted")
    r = row(jobs, queued.id)
    assert (r.state, r.attempts) == ("failed", 1)
    assert counters(jobs, "drops") == (0, 0, 1, 0)


@pytest.mark.parametrize("raised", ["other", "throw_if_aborted", "step-after-drain"])
def test_interrupted_by_the_drain_is_uncounted_and_read_off_the_signal(jobs: JobsEnv, raised: str) -> None:
    worker_signal = CancelSignal()

    def drained(run: JobRun[Any]) -> None:
        run.step.run("first", lambda: 1)
        worker_signal.abort(JobDrainedError("worker w1 is draining", {"worker": "w1"}))
        assert run.signal.aborted and run.signal.reason is not None
        if raised == "other":
            raise ConnectionError("the child the shutdown killed")
        if raised == "throw_if_aborted":
            run.signal.throw_if_aborted()
        run.step.sleep("1h")  # refused with X_ABORTED: still the drain's verdict

    queued = declare(drained, name="drained", retry={"attempts": 1}).enqueue({})
    now = jobs.clock.now_ms()
    ex = execute(jobs, signal=worker_signal)
    assert (ex.outcome, ex.code, ex.stop_reason) == ("interrupted", "X_DRAINING", None)
    assert isinstance(ex.error, JobDrainedError)
    r = row(jobs, queued.id)
    assert (r.state, r.attempts, r.run_at_ms) == ("ready", 0, now)
    assert counters(jobs, "drained") == (0, 0, 0, 0)
    again = execute(jobs)  # attempts: 1 survives the deploy
    assert again.attempt == 1 and again.final_attempt is True


def test_a_run_whose_signal_is_aborted_before_the_body_starts_is_not_run(jobs: JobsEnv) -> None:
    calls: list[str] = []
    declare(lambda run: calls.append("ran"), name="never_started", retry={"attempts": 1}).enqueue({})
    worker_signal = CancelSignal()
    claimed = claim(jobs)
    worker_signal.abort(JobDrainedError("draining"))
    ex = execute_job(claimed, AttemptEnv(driver=jobs.driver, clock=jobs.clock), signal=worker_signal)
    assert (ex.outcome, ex.code) == ("interrupted", "X_DRAINING")
    assert calls == []
    assert row(jobs, claimed.id).attempts == 0


def test_an_operator_cancel_on_the_signal_is_a_counted_failure(jobs: JobsEnv) -> None:
    worker_signal = CancelSignal()

    def cancelled(run: JobRun[Any]) -> None:
        worker_signal.abort()
        raise ConnectionError("unwound")

    queued = declare(cancelled, name="cancelled").enqueue({})
    ex = execute(jobs, signal=worker_signal)
    assert (ex.outcome, ex.code) == ("retried", "X_ABORTED")
    assert row(jobs, queued.id).attempts == 1


def keyed(when_busy: str, on_settled: Any = None, calls: list[str] | None = None) -> JobHandle[Any, Any]:
    def body(run: JobRun[Any]) -> None:
        if calls is not None:
            calls.append("ran")

    return tenant_job(
        body,
        name="keyed",
        concurrency=Concurrency(key=lambda i: i.account, limit=1, when_busy=when_busy),  # type: ignore[arg-type]
        on_settled=on_settled,
    )


def test_refused_over_a_busy_key_under_when_busy_fail(jobs: JobsEnv) -> None:
    told, calls = Told(), []
    handle = keyed("fail", told, calls)
    queued = handle.enqueue({"account": "acct-1", "org_id": "org-1"})
    key = job_lease_key("keyed", "acct-1")
    assert jobs.driver.leases.acquire(key, "other:1", limit=1, ttl_ms=30_000)
    ex = execute(jobs)
    assert (ex.outcome, ex.code, ex.landed) == ("refused", "X_JOB_KEY_BUSY", True)
    assert isinstance(ex.error, UltimateError) and ex.error.meta["key"] == key
    assert calls == []
    r = row(jobs, queued.id)
    assert (r.state, r.last_code, r.attempts) == ("failed", "X_JOB_KEY_BUSY", 0)
    assert counters(jobs, "keyed") == (0, 0, 1, 0)
    assert told.outcomes == ["refused"]
    assert told.settled[0].code == "X_JOB_KEY_BUSY"
    assert told.settled[0].input == AccountIn(account="acct-1", org_id="org-1")
    assert told.tenants == ["org-1"]
    assert jobs.driver.leases.holders(key) == ["other:1"]  # the holder is untouched
    assert run_jobs(clock=jobs.clock).executions == []  # nothing retries it


def test_when_busy_wait_hands_the_claim_back_uncounted(jobs: JobsEnv) -> None:
    told, calls = Told(), []
    queued = keyed("wait", told, calls).enqueue({"account": "acct-1", "org_id": "org-1"})
    key = job_lease_key("keyed", "acct-1")
    jobs.driver.leases.acquire(key, "other:1", limit=1, ttl_ms=30_000)
    now = jobs.clock.now_ms()
    ex = execute(jobs)
    assert ex.outcome is None and ex.landed
    r = row(jobs, queued.id)
    assert (r.state, r.attempts) == ("ready", 0)
    assert r.run_at_ms > now
    assert calls == [] and told.settled == []
    assert counters(jobs, "keyed") == (0, 0, 0, 0)
    jobs.driver.leases.release(key, "other:1")
    report = run_jobs(clock=jobs.clock)
    assert [e.outcome for e in report.executions] == ["completed"]
    assert report.executions[0].attempt == 1
    assert jobs.driver.leases.holders(key) == []  # the run's slot is released after it


def test_a_runs_own_leftover_slot_makes_it_wait_not_refuse(jobs: JobsEnv) -> None:
    told, calls = Told(), []
    queued = keyed("fail", told, calls).enqueue({"account": "acct-1", "org_id": "org-1"})
    key = job_lease_key("keyed", "acct-1")
    jobs.driver.leases.acquire(key, f"{queued.id}:an-earlier-claim", limit=1, ttl_ms=30_000)
    ex = execute(jobs)
    assert ex.outcome is None
    assert row(jobs, queued.id).state == "ready"
    assert told.settled == [] and calls == []


def test_a_key_that_throws_at_claim_takes_the_retry_path(jobs: JobsEnv) -> None:
    explode = {"now": False}

    def key(i: AccountIn) -> str:
        if explode["now"]:
            raise KeyError("account")
        return i.account

    calls: list[str] = []
    handle = tenant_job(lambda run: calls.append("ran"), name="key_throws", concurrency=Concurrency(key=key))
    queued = handle.enqueue({"account": "a", "org_id": "g"})
    explode["now"] = True
    ex = execute(jobs)
    assert ex.outcome == "retried" and isinstance(ex.error, KeyError)
    assert calls == []
    assert row(jobs, queued.id).attempts == 1


def test_retry_after_uses_the_named_time_clamped_by_max_delay(jobs: JobsEnv) -> None:
    def limited(run: JobRun[Any]) -> None:
        raise UltimateError("X_RATE_LIMITED", "slow down", {"retryAfterSeconds": 30})

    declare(limited, name="limited", retry={"attempts": 3, "jitter": False}).enqueue({})
    now = jobs.clock.now_ms()
    ex = execute(jobs)
    assert (ex.outcome, ex.resume_at_ms) == ("retried", now + 30_000)

    registry.unregister("limited")
    jobs.clock.advance(30_000)
    declare(limited, name="limited", retry={"attempts": 3, "jitter": False, "max_delay": "10s"})
    ex = execute(jobs)
    assert ex.resume_at_ms == jobs.clock.now_ms() + 10_000


def test_retry_after_is_spread_upward_when_jitter_is_on(jobs: JobsEnv) -> None:
    def limited(run: JobRun[Any]) -> None:
        raise UltimateError("X_OVERLOADED", "busy", {"retryAfterSeconds": 30})

    declare(limited, name="overloaded", retry={"attempts": 3}).enqueue({})
    now = jobs.clock.now_ms()
    ex = execute(jobs)
    assert ex.resume_at_ms is not None and now + 30_000 <= ex.resume_at_ms <= now + 33_000


def test_a_retry_after_code_without_a_stated_time_follows_the_backoff(jobs: JobsEnv) -> None:
    def limited(run: JobRun[Any]) -> None:
        raise UltimateError("X_RATE_LIMITED", "slow down")

    declare(limited, name="unstated").enqueue({})
    now = jobs.clock.now_ms()
    assert execute(jobs).resume_at_ms == now + 1000


# -- the deadline ------------------------------------------------------------------------------


def test_the_timeout_aborts_the_signal_and_retries_at_the_deadline(
    jobs: JobsEnv, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[tuple[bool, str | None]] = []

    def ignores_the_signal(run: JobRun[Any]) -> str:
        jobs.clock.advance(10_001)
        seen.append((run.signal.aborted, run.signal.reason.code if run.signal.reason else None))
        return "finished anyway"

    queued = declare(ignores_the_signal, name="slowpoke", timeout="10s").enqueue({})
    start = jobs.clock.now_ms()
    with caplog.at_level(logging.WARNING, logger="ultimate_jobs"):
        ex = execute(jobs)
    assert seen == [(True, "X_JOB_TIMEOUT")]
    assert (ex.outcome, ex.code, ex.abandoned) == ("retried", "X_JOB_TIMEOUT", True)
    assert ex.resume_at_ms == start + 10_000 + 1000  # settled at the deadline, then the backoff
    assert ex.result is None
    r = row(jobs, queued.id)
    assert (r.state, r.attempts, r.last_code) == ("ready", 1, "X_JOB_TIMEOUT")
    assert len(events(caplog, "jobs.timeout.abandoned")) == 1
    assert counters(jobs, "slowpoke") == (0, 1, 0, 0)


def test_a_body_that_unwinds_at_the_deadline_is_settled_once(jobs: JobsEnv, caplog: pytest.LogCaptureFixture) -> None:
    def unwinds(run: JobRun[Any]) -> None:
        jobs.clock.advance(10_000)
        run.signal.throw_if_aborted()

    declare(unwinds, name="unwinds", timeout="10s").enqueue({})
    with caplog.at_level(logging.WARNING, logger="ultimate_jobs"):
        ex = execute(jobs)
    assert (ex.outcome, ex.code, ex.abandoned) == ("retried", "X_JOB_TIMEOUT", False)
    assert events(caplog, "jobs.timeout.abandoned") == []
    assert counters(jobs, "unwinds") == (0, 1, 0, 0)


def test_a_body_inside_its_timeout_completes(jobs: JobsEnv) -> None:
    def quick(run: JobRun[Any]) -> str:
        jobs.clock.advance(9_999)
        return "ok"

    declare(quick, name="quick", timeout="10s").enqueue({})
    ex = execute(jobs)
    assert (ex.outcome, ex.result, ex.abandoned) == ("completed", "ok", False)
    jobs.clock.advance(10_000)  # the disarmed deadline fires nothing
    assert counters(jobs, "quick") == (1, 0, 0, 0)


def test_final_attempt_is_true_exactly_when_attempt_reaches_attempts(jobs: JobsEnv) -> None:
    presented: list[tuple[int, bool]] = []

    def fails(run: JobRun[Any]) -> None:
        presented.append((run.attempt, run.final_attempt))
        raise ValueError("x")

    declare(fails, name="finals").enqueue({})
    report = run_jobs(clock=jobs.clock)
    assert presented == [(1, False), (2, False), (3, True)]
    assert [e.final_attempt for e in report.executions] == [False, False, True]


# -- the stored payload and the tenant ---------------------------------------------------------


def test_a_stored_payload_that_no_longer_parses_dead_letters(jobs: JobsEnv) -> None:
    told, calls = Told(), []
    queued = tenant_job(lambda run: calls.append("ran"), name="reparsed", on_settled=told).enqueue(
        {"account": "a", "org_id": "org-1"}
    )
    jobs.driver.rows[queued.id].input = {"account": 5}
    ex = execute(jobs)
    assert (ex.outcome, ex.code, ex.stop_reason, ex.attempt) == ("dead-lettered", "X_VALIDATION", "terminal", 1)
    assert calls == []
    assert row(jobs, queued.id).state == "dead"
    assert told.outcomes == ["dead-lettered"]
    assert told.settled[0].input is None and told.settled[0].code == "X_VALIDATION"


def test_the_run_acts_under_the_declared_tenant(jobs: JobsEnv) -> None:
    seen: list[tuple[str | None, str | None, str | None]] = []

    def scoped(run: JobRun[Any]) -> None:
        seen.append((run.actor.org_id, run.tenant_id, current_tenant()))

    tenant_job(scoped, name="scoped").enqueue({"account": "a", "org_id": "org-1"})

    def unscoped(run: JobRun[Any]) -> None:
        seen.append((run.actor.org_id, run.tenant_id, current_tenant()))

    declare(unscoped, name="unscoped").enqueue({})
    run_jobs(clock=jobs.clock)
    assert sorted(seen, key=str) == sorted([("org-1", "org-1", "org-1"), (None, None, None)], key=str)
    assert current_tenant() is None  # nothing leaks out of the run


def test_a_row_whose_tenant_is_not_the_payloads_org_dead_letters_on_attempt_1(jobs: JobsEnv) -> None:
    calls: list[str] = []
    queued = tenant_job(lambda run: calls.append("ran"), name="mismatch", retry={"attempts": 5}).enqueue(
        {"account": "a", "org_id": "org-1"}
    )
    jobs.driver.rows[queued.id].tenant_id = "org-2"
    ex = execute(jobs)
    assert (ex.outcome, ex.code, ex.stop_reason, ex.attempt) == (
        "dead-lettered",
        "X_JOB_TENANT_MISMATCH",
        "terminal",
        1,
    )
    assert calls == []
    assert row(jobs, queued.id).state == "dead"


def test_an_unregistered_job_is_handed_back_uncounted(jobs: JobsEnv) -> None:
    queued = declare(lambda run: None, name="departed").enqueue({})
    registry.unregister("departed")
    ex = execute(jobs)
    assert ex.outcome is None and ex.landed
    r = row(jobs, queued.id)
    assert (r.state, r.attempts) == ("ready", 0)
    assert r.run_at_ms == jobs.clock.now_ms() + 60_000


# -- on_settled --------------------------------------------------------------------------------


def test_on_settled_is_told_once_when_the_run_completes_with_its_result(jobs: JobsEnv) -> None:
    told = Told()
    attempts: list[int] = []

    def eventually_ok(run: JobRun[Any]) -> dict[str, int]:
        attempts.append(run.attempt)
        run.step.sleep("1m")
        if run.attempt == 1:
            raise ValueError("first try fails")
        return {"rows": 2}

    queued = tenant_job(eventually_ok, name="watched", on_settled=told).enqueue({"account": "a", "org_id": "org-1"})
    report = run_jobs(clock=jobs.clock)
    assert [e.outcome for e in report.executions] == ["suspended", "retried", "completed"]
    assert told.outcomes == ["completed"]  # not for the suspension, not for the retry
    settled = told.settled[0]
    assert (settled.job_id, settled.name, settled.attempt, settled.result) == (queued.id, "watched", 2, {"rows": 2})
    assert settled.run_id == queued.run_id
    assert settled.input == AccountIn(account="a", org_id="org-1")
    assert (settled.error, settled.code, settled.tenant_id) == (None, None, "org-1")
    assert told.tenants == ["org-1"]  # the hook runs under the job's tenant


@pytest.mark.parametrize(("dead_letter", "outcome"), [(True, "dead-lettered"), (False, "dropped")])
def test_on_settled_is_told_a_failure_for_good(jobs: JobsEnv, dead_letter: bool, outcome: str) -> None:
    told = Told()

    def fails(run: JobRun[Any]) -> None:
        raise UltimateError("X_GATEWAY_DOWN", "down")

    tenant_job(
        fails, name="fails", on_settled=told, retry={"attempts": 2, "jitter": False, "dead_letter": dead_letter}
    ).enqueue({"account": "a", "org_id": "org-1"})
    report = run_jobs(clock=jobs.clock)
    assert [e.outcome for e in report.executions] == ["retried", outcome]
    assert told.outcomes == [outcome]
    assert told.settled[0].code == "X_GATEWAY_DOWN"
    assert told.settled[0].error is not None and told.settled[0].error.startswith("X_GATEWAY_DOWN: down")
    assert told.settled[0].result is None


def test_on_settled_is_not_told_an_interruption(jobs: JobsEnv) -> None:
    told = Told()
    worker_signal = CancelSignal()

    def drained(run: JobRun[Any]) -> None:
        worker_signal.abort(JobDrainedError("draining"))
        run.signal.throw_if_aborted()

    declare(drained, name="drained_hook", on_settled=told).enqueue({})
    assert execute(jobs, signal=worker_signal).outcome == "interrupted"
    assert told.calls == 0


def test_on_settled_carries_the_ctx(jobs: JobsEnv) -> None:
    told = Told()
    declare(lambda run: run.ctx["app"], name="ctxd", on_settled=told).enqueue({})
    ex = execute(jobs, context=lambda: {"app": "shop"})
    assert ex.result == "shop"
    assert told.settled[0].ctx == {"app": "shop"}


def test_a_hook_that_throws_twice_runs_three_times(jobs: JobsEnv, caplog: pytest.LogCaptureFixture) -> None:
    told = Told(fail_times=2)
    declare(lambda run: "ok", name="flaky_hook", on_settled=told).enqueue({})
    with caplog.at_level(logging.ERROR, logger="ultimate_jobs"):
        ex = execute(jobs)
    assert told.calls == 3 and told.outcomes == ["completed"]
    assert ex.on_settled_error is None
    assert events(caplog, "jobs.on-settled.failed") == []


def test_a_hook_that_always_throws_is_logged_and_reported_never_raised(
    jobs: JobsEnv, caplog: pytest.LogCaptureFixture
) -> None:
    told = Told(fail_times=99)
    queued = declare(lambda run: "ok", name="broken_hook", on_settled=told).enqueue({})
    with caplog.at_level(logging.ERROR, logger="ultimate_jobs"):
        ex = execute(jobs)
    assert told.calls == 3
    assert ex.on_settled_error is not None and ex.on_settled_error.code == "X_JOB_ON_SETTLED_FAILED"
    assert (ex.outcome, ex.result, ex.landed) == ("completed", "ok", True)
    assert row(jobs, queued.id).state == "done"
    assert counters(jobs, "broken_hook") == (1, 0, 0, 0)
    assert len(events(caplog, "jobs.on-settled.failed")) == 1


# -- the final-attempt burial ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dead_letter", "state", "outcome"), [(True, "dead", "dead-lettered"), (False, "failed", "dropped")]
)
def test_a_lease_lapsed_on_the_final_attempt_is_buried_by_the_claim(
    jobs: JobsEnv, caplog: pytest.LogCaptureFixture, dead_letter: bool, state: str, outcome: str
) -> None:
    told, calls = Told(), []
    queued = tenant_job(
        lambda run: calls.append("ran"),
        name="killer",
        on_settled=told,
        retry={"attempts": 1, "dead_letter": dead_letter},
    ).enqueue({"account": "a", "org_id": "org-1"})
    claim(jobs, worker_id="died")  # the worker that took it died
    jobs.clock.advance(jobs.driver.visibility_timeout_ms + 1)
    with caplog.at_level(logging.ERROR, logger="ultimate_jobs"):
        report = run_jobs(clock=jobs.clock)
    assert report.executions == [] and calls == []
    assert [e.id for e in report.exhausted] == [queued.id]
    r = row(jobs, queued.id)
    assert (r.state, r.last_error, r.last_code) == (state, LEASE_LAPSED_FINAL_ATTEMPT, None)
    assert told.outcomes == [outcome]
    settled = told.settled[0]
    assert (settled.code, settled.error) == (None, LEASE_LAPSED_FINAL_ATTEMPT)
    assert settled.input == AccountIn(account="a", org_id="org-1")
    assert told.tenants == ["org-1"]
    assert len(events(caplog, "jobs.claim.exhausted")) == 1
    expected = (0, 0, 0, 1) if dead_letter else (0, 0, 1, 0)
    assert counters(jobs, "killer") == expected


def test_a_lease_lapsed_with_attempts_left_is_claimed_again(jobs: JobsEnv) -> None:
    declare(lambda run: run.attempt, name="survivor", retry={"attempts": 2}).enqueue({})
    claim(jobs, worker_id="died")
    report = run_jobs(clock=jobs.clock)  # advances to the lapsed lease itself
    assert report.exhausted == []
    assert [(e.outcome, e.result) for e in report.executions] == [("completed", 2)]


# -- progress ----------------------------------------------------------------------------------


def test_progress_writes_at_most_once_a_second_plus_the_last_before_the_settle(jobs: JobsEnv) -> None:
    seen: list[Any] = []

    def reports(run: JobRun[Any]) -> None:
        def stored() -> Any:
            progress = row(jobs, run.job_id).progress
            return None if progress is None else (progress.done, progress.total, progress.note)

        run.progress(1, 10, "start")
        seen.append(stored())
        run.progress(2, 10)
        seen.append(stored())
        jobs.clock.advance(999)
        run.progress(3, 10)
        seen.append(stored())
        jobs.clock.advance(1)
        run.progress(4, 10)
        seen.append(stored())
        run.progress(5, 10, "last")
        seen.append(stored())

    queued = declare(reports, name="progress").enqueue({})
    execute(jobs)
    assert seen == [(1, 10, "start"), (1, 10, "start"), (1, 10, "start"), (4, 10, None), (4, 10, None)]
    final = row(jobs, queued.id).progress
    assert (final.done, final.total, final.note) == (5, 10, "last")
    assert row(jobs, queued.id).state == "done"


def test_a_secret_the_body_quotes_in_its_error_stays_out_of_the_row_the_log_and_on_settled(
    jobs: JobsEnv, caplog: pytest.LogCaptureFixture
) -> None:
    from pydantic import BaseModel, SecretStr

    class Login(BaseModel):
        user: str
        password: SecretStr

    told: list[Settled] = []

    @job(input=Login, idempotency_key=lambda i: i.user, tenant="none", retry={"attempts": 1}, on_settled=told.append)
    def log_in(run: JobRun[Login]) -> None:
        raise RuntimeError(f"the site refused {run.input.password.get_secret_value()}")

    caplog.set_level(logging.WARNING, logger="ultimate_jobs")
    job_id = log_in.enqueue({"user": "ada", "password": "hunter2-secret"}).id
    run_jobs(clock=jobs.clock)
    record = jobs.driver.operator.get(job_id)
    assert record is not None and record.state == "dead"
    assert "hunter2-secret" not in (record.last_error or "")
    assert "hunter2-secret" not in (told[0].error or "")
    assert all("hunter2-secret" not in str(getattr(r, "jobs", "")) for r in caplog.records)
    assert "the site refused" in (record.last_error or "")


# A secret with a quote, a backslash and a character URLs encode: each rendering differs from the text.
AWKWARD_SECRET = "hunter2'\"\\ pass/word"


@pytest.mark.parametrize(
    "quote",
    [
        pytest.param(lambda s: s, id="as-is"),
        pytest.param(repr, id="repr"),
        pytest.param(lambda s: json.dumps(s), id="json"),
        pytest.param(lambda s: repr(repr(s)), id="repr-of-repr"),
        pytest.param(lambda s: urllib.parse.quote(s, safe=""), id="url"),
        pytest.param(lambda s: urllib.parse.quote_plus(s), id="url-plus"),
        pytest.param(lambda s: repr({"password": s}), id="a-dict-in-a-message"),
    ],
)
def test_a_secret_quoted_in_any_rendering_is_scrubbed_from_the_row_the_logs_on_settled_and_progress(
    jobs: JobsEnv, caplog: pytest.LogCaptureFixture, quote: Callable[[str], str]
) -> None:
    from pydantic import BaseModel, SecretStr

    class Login(BaseModel):
        user: str
        password: SecretStr

    told: list[Settled] = []

    def tell(settled: Settled) -> None:
        told.append(settled)
        raise KeyError(AWKWARD_SECRET)  # the hook's own error quotes the secret through repr()

    @job(input=Login, idempotency_key=lambda i: i.user, tenant="none", retry={"attempts": 1}, on_settled=tell)
    def log_in(run: JobRun[Login]) -> None:
        secret = run.input.password.get_secret_value()
        run.progress(1, 2, f"trying {quote(secret)}")
        raise RuntimeError(f"the site refused {quote(secret)}")

    caplog.set_level(logging.DEBUG, logger="ultimate_jobs")
    job_id = log_in.enqueue({"user": "ada", "password": AWKWARD_SECRET}).id
    run_jobs(clock=jobs.clock)
    record = jobs.driver.operator.get(job_id)
    assert record is not None and record.state == "dead"
    texts = [
        record.last_error or "",
        record.progress.note if record.progress else "",
        told[0].error or "",
        *(str(getattr(r, "jobs", "")) for r in caplog.records),
        *(r.getMessage() for r in caplog.records),
    ]
    needles = {quote(AWKWARD_SECRET), AWKWARD_SECRET, "hunter2"}
    leaks = [(needle, text) for text in texts for needle in needles if needle in text]
    assert leaks == []
    assert "the site refused" in (record.last_error or "") and "trying" in (record.progress.note or "")
