"""Durable steps: replay, sleeps and waits under the frozen clock, step ceilings, the abort fence."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pydantic
import pytest
from pydantic import SecretBytes, SecretStr

from tests.conftest import JobsEnv
from ultimate_jobs import JobRun, current_signal, job, publish_event, reset_event_bus
from ultimate_jobs.core.definition import JobHandle
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.events import event_bus
from ultimate_jobs.guards.sealing import is_envelope
from ultimate_jobs.testing import run_jobs

NO_JITTER = {"attempts": 3, "delay": 1000, "jitter": False}


def declare(fn: Callable[[JobRun[Any]], Any], **options: Any) -> JobHandle[Any, Any]:
    options.setdefault("idempotency_key", lambda i: "k")
    options.setdefault("tenant", "none")
    options.setdefault("retry", NO_JITTER)
    return job(**options)(fn)


def steps_of(env: JobsEnv, job_id: str) -> dict[str, Any]:
    return {s.name: s for s in env.driver.operator.steps(job_id)}


def row(env: JobsEnv, job_id: str) -> Any:
    record = env.driver.operator.get(job_id)
    assert record is not None
    return record


# -- step.run ----------------------------------------------------------------------------------


def test_a_step_records_when_it_started_and_how_long_it_ran(jobs: JobsEnv) -> None:
    def slow() -> str:
        jobs.clock.advance(870)  # the step's work, on the frozen clock
        return "ok"

    def body(run: JobRun[Any]) -> None:
        run.step.run("quick", lambda: 1)
        run.step.run("slow", slow)

    queued = declare(body).enqueue({})
    begun = jobs.clock.now_ms()
    run_jobs(jobs.driver, clock=jobs.clock)
    steps = steps_of(jobs, queued.id)
    assert (steps["quick"].started_at_ms, steps["quick"].finished_at_ms) == (begun, begun)
    assert (steps["slow"].started_at_ms, steps["slow"].finished_at_ms) == (begun, begun + 870)


def test_a_step_that_ran_is_not_run_again_on_the_next_attempt(jobs: JobsEnv) -> None:
    calls = {"a": 0, "b": 0}
    seen_a: list[Any] = []

    def a() -> dict[str, int]:
        calls["a"] += 1
        return {"charged": 42}

    def b() -> str:
        calls["b"] += 1
        if calls["b"] == 1:
            raise RuntimeError("gateway down")
        return "shipped"

    def replaying(run: JobRun[Any]) -> str:
        seen_a.append(run.step.run("a", a))
        return run.step.run("b", b)

    handle = declare(replaying)
    queued = handle.enqueue({})
    report = run_jobs(clock=jobs.clock)
    assert [e.outcome for e in report.executions] == ["retried", "completed"]
    assert calls == {"a": 1, "b": 2}
    assert seen_a == [{"charged": 42}, {"charged": 42}]  # replayed from storage
    assert report.last(queued.id).result == "shipped"  # type: ignore[union-attr]
    stored = steps_of(jobs, queued.id)
    assert stored["a"].output == {"charged": 42} and stored["b"].output == "shipped"
    assert stored["a"].seq < stored["b"].seq


def test_a_steps_output_is_persisted_before_the_next_step_starts(jobs: JobsEnv) -> None:
    observed: list[Any] = []

    def persisted(run: JobRun[Any]) -> None:
        run.step.run("first", lambda: [1, 2])
        run.step.run("second", lambda: observed.append(steps_of(jobs, run.job_id).get("first")))

    declare(persisted).enqueue({})
    run_jobs(clock=jobs.clock)
    assert len(observed) == 1 and observed[0] is not None
    assert (observed[0].status, observed[0].output) == ("done", [1, 2])


@pytest.mark.parametrize("bad", [object(), {1, 2}, math.nan, {"x": math.inf}])
def test_a_step_output_that_is_not_json_fails_the_attempt_naming_the_step(jobs: JobsEnv, bad: Any) -> None:
    caught: list[UltimateError] = []

    def unserialisable(run: JobRun[Any]) -> None:
        try:
            run.step.run("load", lambda: bad)
        except UltimateError as exc:
            caught.append(exc)
            raise

    queued = declare(unserialisable).enqueue({})
    report = run_jobs(clock=jobs.clock)
    assert caught[0].code == "X_INVARIANT"
    assert caught[0].meta["step"] == "load" and "'load'" in caught[0].message
    execution = report.last(queued.id)
    assert execution is not None and execution.outcome == "dead-lettered" and execution.code == "X_INVARIANT"
    assert "load" not in steps_of(jobs, queued.id)


def test_the_value_returned_is_the_stored_json_on_first_run_and_replay(jobs: JobsEnv) -> None:
    seen: list[Any] = []
    attempts: list[int] = []

    def shaped(run: JobRun[Any]) -> None:
        attempts.append(run.attempt)
        seen.append(run.step.run("shape", lambda: {"pair": (1, 2), 3: "three"}))
        if run.attempt == 1:
            raise RuntimeError("again")

    queued = declare(shaped).enqueue({})
    run_jobs(clock=jobs.clock)
    expected = {"pair": [1, 2], "3": "three"}
    assert attempts == [1, 2]
    assert seen == [expected, expected]
    assert steps_of(jobs, queued.id)["shape"].output == expected


def test_a_duplicate_step_name_is_x_step_duplicate(jobs: JobsEnv) -> None:
    calls: list[str] = []

    def twice(run: JobRun[Any]) -> None:
        run.step.run("send", lambda: calls.append("first"))
        run.step.run("send", lambda: calls.append("second"))

    queued = declare(twice, retry={"attempts": 1}).enqueue({})
    execution = run_jobs(clock=jobs.clock).last(queued.id)
    assert execution is not None and execution.code == "X_STEP_DUPLICATE"
    assert isinstance(execution.error, UltimateError) and execution.error.meta["step"] == "send"
    assert calls == ["first"]  # not a silent overwrite


# -- secrets in step outputs -------------------------------------------------------------------

TOKEN = "tok_live_9f8e7d6c"


class Charge(pydantic.BaseModel):
    token: SecretStr


def twice_with(step: Callable[[JobRun[Any]], Any], seen: list[Any]) -> Callable[[JobRun[Any]], None]:
    """A body that records ``step(run)`` on each attempt and fails the first (so the second replays it)."""

    def body(run: JobRun[Any]) -> None:
        seen.append(step(run))
        if run.attempt == 1:
            raise RuntimeError("again")

    return body


def test_a_secret_object_a_step_returns_is_stored_sealed_and_replayed_as_itself(jobs: JobsEnv) -> None:
    seen: list[Any] = []
    returned = {"token": SecretStr(TOKEN), "raw": SecretBytes(b"\xffraw"), "n": 1, "pair": (1, 2)}
    queued = declare(twice_with(lambda run: run.step.run("a", lambda: returned), seen)).enqueue({})
    run_jobs(clock=jobs.clock)
    expected = {"token": SecretStr(TOKEN), "raw": SecretBytes(b"\xffraw"), "n": 1, "pair": [1, 2]}
    assert seen == [expected, expected] and isinstance(seen[1]["token"], SecretStr)
    stored = steps_of(jobs, queued.id)["a"].output
    assert is_envelope(stored["token"]) and is_envelope(stored["raw"]) and stored["n"] == 1
    assert TOKEN not in json.dumps(stored)


def test_a_step_output_quoting_an_input_secret_is_stored_sealed_and_replayed_as_returned(jobs: JobsEnv) -> None:
    seen: list[Any] = []

    def sign(run: JobRun[Charge]) -> Any:
        token = run.input.token.get_secret_value()
        return run.step.run("sign", lambda: {"header": f"Bearer {token}", "url": f"/pay?t={quote(token)}", "ok": 1})

    handle = declare(twice_with(sign, seen), input=Charge)
    queued = handle.enqueue({"token": TOKEN})
    run_jobs(clock=jobs.clock)
    expected = {"header": f"Bearer {TOKEN}", "url": f"/pay?t={quote(TOKEN)}", "ok": 1}
    assert seen == [expected, expected]
    stored = steps_of(jobs, queued.id)["sign"].output
    assert is_envelope(stored["header"]) and is_envelope(stored["url"]) and stored["ok"] == 1


def test_an_output_whose_keys_quote_a_secret_is_sealed_whole(jobs: JobsEnv) -> None:
    seen: list[Any] = []
    handle = declare(
        twice_with(lambda run: run.step.run("k", lambda: {run.input.token.get_secret_value(): "seen"}), seen),
        input=Charge,
    )
    queued = handle.enqueue({"token": TOKEN})
    run_jobs(clock=jobs.clock)
    assert seen == [{TOKEN: "seen"}, {TOKEN: "seen"}]
    assert is_envelope(steps_of(jobs, queued.id)["k"].output)


def test_a_step_output_holding_the_envelope_key_in_clear_is_refused(jobs: JobsEnv) -> None:
    forge = declare(lambda run: run.step.run("forge", lambda: {"$uj.secret": "x"}), retry={"attempts": 1})
    queued = forge.enqueue({})
    execution = run_jobs(clock=jobs.clock).last(queued.id)
    assert execution is not None and execution.code == "X_INVARIANT"
    assert isinstance(execution.error, UltimateError) and "reserves it" in execution.error.message


def test_a_sealed_output_no_key_opens_fails_the_replay_with_x_job_secret_unreadable(
    jobs: JobsEnv, settings: Any
) -> None:
    def body(run: JobRun[Any]) -> None:
        run.step.run("a", lambda: SecretStr(TOKEN))
        run.step.sleep("1s")

    queued = declare(body).enqueue({})
    run_jobs(clock=jobs.clock, advance=False)  # the step ran and the run sleeps
    settings.SECRET_KEY = "a-new-key"  # rotated without the old one in SECRET_KEY_FALLBACKS
    execution = run_jobs(clock=jobs.clock).last(queued.id)
    assert execution is not None and execution.outcome == "dead-lettered"
    assert execution.code == "X_JOB_SECRET_UNREADABLE" and execution.attempt == 1
    assert isinstance(execution.error, UltimateError) and "step 'a'" in execution.error.message


# -- step.sleep --------------------------------------------------------------------------------


def test_both_sleep_forms_suspend_and_resume_without_burning_an_attempt(jobs: JobsEnv) -> None:
    presented: list[tuple[int, bool]] = []
    start = jobs.clock.now_ms()

    def sleeper(run: JobRun[Any]) -> str:
        presented.append((run.attempt, run.final_attempt))
        run.step.sleep("1h")
        run.step.sleep("cool-off", "2h")
        return "awake"

    queued = declare(sleeper, retry={"attempts": 2}).enqueue({})
    first = run_jobs(clock=jobs.clock, advance=False)
    assert [e.outcome for e in first.executions] == ["suspended"]
    assert first.executions[0].resume_at_ms == start + 3_600_000
    parked = row(jobs, queued.id)
    assert (parked.state, parked.run_at_ms, parked.attempts) == ("suspended", start + 3_600_000, 0)

    rest = run_jobs(clock=jobs.clock)
    assert [e.outcome for e in rest.executions] == ["suspended", "completed"]
    assert rest.executions[-1].result == "awake"
    assert jobs.clock.now_ms() == start + 3 * 3_600_000
    assert presented == [(1, False), (1, False), (1, False)]  # the same attempt, presented again
    assert row(jobs, queued.id).attempts == 1
    names = [s.name for s in jobs.driver.operator.steps(queued.id)]
    assert names == ["sleep:1h", "cool-off"]


def test_a_body_catching_exception_cannot_swallow_a_suspension(jobs: JobsEnv) -> None:
    def swallowing(run: JobRun[Any]) -> str:
        try:
            run.step.sleep("1m")
        except Exception:
            return "swallowed"
        return "slept"

    declare(swallowing).enqueue({})
    report = run_jobs(clock=jobs.clock)
    assert [e.outcome for e in report.executions] == ["suspended", "completed"]
    assert report.executions[-1].result == "slept"


def test_a_negative_sleep_is_refused(jobs: JobsEnv) -> None:
    def negative(run: JobRun[Any]) -> None:
        run.step.sleep("back", -5)

    queued = declare(negative, retry={"attempts": 1}).enqueue({})
    execution = run_jobs(clock=jobs.clock).last(queued.id)
    assert execution is not None and execution.code == "X_INVARIANT"


# -- step.wait_for_event -----------------------------------------------------------------------


def waiter(
    *, timeout: str = "5m", match: dict[str, Any] | None = None, required: bool = False
) -> Callable[[JobRun[Any]], Any]:
    def wait(run: JobRun[Any]) -> Any:
        return run.step.wait_for_event("paid", "order.paid", timeout=timeout, match=match, required=required)

    return wait


def test_wait_for_event_resumes_when_a_matching_event_is_published(jobs: JobsEnv) -> None:
    queued = declare(waiter(match={"order_id": "o-1"}), event_poll="10s").enqueue({})
    first = run_jobs(clock=jobs.clock, advance=False)
    assert [e.outcome for e in first.executions] == ["suspended"]
    assert row(jobs, queued.id).state == "suspended"
    assert steps_of(jobs, queued.id)["paid"].status == "waiting"

    publish_event("order.paid", {"order_id": "o-1", "amount": 7})
    jobs.clock.advance(10_000)
    resumed = run_jobs(clock=jobs.clock, advance=False)
    assert [e.outcome for e in resumed.executions] == ["completed"]
    assert resumed.executions[0].result == {"order_id": "o-1", "amount": 7}
    assert steps_of(jobs, queued.id)["paid"].output == {"order_id": "o-1", "amount": 7}


def test_the_wait_parks_for_event_poll_between_polls(jobs: JobsEnv) -> None:
    start = jobs.clock.now_ms()
    queued = declare(waiter(), event_poll="10s").enqueue({})
    execution = run_jobs(clock=jobs.clock, advance=False).last(queued.id)
    assert execution is not None and execution.resume_at_ms == start + 10_000
    jobs.clock.advance(9_999)
    assert run_jobs(clock=jobs.clock, advance=False).executions == []  # not due yet


def test_wait_for_event_ignores_events_that_do_not_match(jobs: JobsEnv) -> None:
    queued = declare(waiter(match={"order_id": "o-1", "meta": {"currency": "EUR"}}), event_poll="10s").enqueue({})
    run_jobs(clock=jobs.clock, advance=False)
    publish_event("order.paid", {"order_id": "o-2", "meta": {"currency": "EUR"}})
    publish_event("order.paid", {"order_id": "o-1", "meta": {"currency": "USD"}})
    publish_event("order.refunded", {"order_id": "o-1", "meta": {"currency": "EUR"}})
    jobs.clock.advance(10_000)
    still = run_jobs(clock=jobs.clock, advance=False)
    assert [e.outcome for e in still.executions] == ["suspended"]
    publish_event("order.paid", {"order_id": "o-1", "meta": {"currency": "EUR", "fx": 1}})
    jobs.clock.advance(10_000)
    done = run_jobs(clock=jobs.clock, advance=False).last(queued.id)
    assert done is not None and done.outcome == "completed"
    assert done.result == {"order_id": "o-1", "meta": {"currency": "EUR", "fx": 1}}


def test_wait_for_event_times_out_with_none(jobs: JobsEnv) -> None:
    start = jobs.clock.now_ms()
    queued = declare(waiter(timeout="2m"), event_poll="30s").enqueue({})
    report = run_jobs(clock=jobs.clock)
    assert report.outcomes["suspended"] == 4 and report.outcomes["completed"] == 1
    execution = report.last(queued.id)
    assert execution is not None and execution.result is None
    assert jobs.clock.now_ms() == start + 120_000
    assert steps_of(jobs, queued.id)["paid"].status == "done"
    assert row(jobs, queued.id).attempts == 1


def test_a_required_wait_that_times_out_is_x_job_timeout(jobs: JobsEnv) -> None:
    queued = declare(waiter(timeout="1m", required=True), retry={"attempts": 1}).enqueue({})
    report = run_jobs(clock=jobs.clock)
    execution = report.last(queued.id)
    assert execution is not None and execution.code == "X_JOB_TIMEOUT"
    assert execution.outcome == "dead-lettered"
    assert row(jobs, queued.id).state == "dead"


def test_an_event_published_before_the_wait_started_does_not_match(jobs: JobsEnv) -> None:
    publish_event("order.paid", {"order_id": "o-1"})
    jobs.clock.advance(1)
    queued = declare(waiter(timeout="1m")).enqueue({})
    report = run_jobs(clock=jobs.clock)
    execution = report.last(queued.id)
    assert execution is not None and execution.outcome == "completed" and execution.result is None


def test_reset_event_bus_forgets_published_events_and_keeps_the_frozen_clock(jobs: JobsEnv) -> None:
    start = jobs.clock.now_ms()
    queued = declare(waiter(timeout="1m"), event_poll="10s").enqueue({})
    run_jobs(clock=jobs.clock, advance=False)
    publish_event("order.paid", {"order_id": "o-1"})
    reset_event_bus()  # the test seam: an answer published before it resumes nobody after it
    assert event_bus().find("order.paid", None, since_ms=0) is None
    assert event_bus().now() == jobs.clock.now_ms()  # the rebuilt bus reads the installed clock
    jobs.clock.advance(10_000)
    polled = run_jobs(clock=jobs.clock, advance=False)
    assert [e.outcome for e in polled.executions] == ["suspended"]  # judged on the frozen clock
    rest = run_jobs(clock=jobs.clock)
    execution = rest.last(queued.id)
    assert execution is not None and execution.outcome == "completed" and execution.result is None
    assert jobs.clock.now_ms() == start + 60_000


# -- step ceilings and the abort fence ---------------------------------------------------------


def test_a_step_past_its_step_timeout_fails_the_attempt_and_stores_nothing(jobs: JobsEnv) -> None:
    aborted_inside: list[tuple[bool, bool]] = []

    def slow(run: JobRun[Any]) -> Any:
        def work() -> str:
            jobs.clock.advance(5_001)
            signal = current_signal()
            assert signal is not None
            aborted_inside.append((signal.aborted, run.signal.aborted))
            return "late"

        return run.step.run("slow", work)

    queued = declare(slow, step_timeout="5s").enqueue({})
    report = run_jobs(clock=jobs.clock, advance=False)
    execution = report.last(queued.id)
    assert execution is not None
    assert (execution.outcome, execution.code) == ("retried", "X_JOB_TIMEOUT")
    assert aborted_inside == [(True, False)]  # the step's own signal, not the run's
    assert "slow" not in steps_of(jobs, queued.id)
    assert row(jobs, queued.id).state == "ready" and row(jobs, queued.id).attempts == 1


def test_a_step_inside_its_step_timeout_completes(jobs: JobsEnv) -> None:
    def quick(run: JobRun[Any]) -> Any:
        return run.step.run("quick", lambda: jobs.clock.advance(4_999) and "ok")

    queued = declare(quick, step_timeout="5s").enqueue({})
    execution = run_jobs(clock=jobs.clock, advance=False).last(queued.id)
    assert execution is not None and execution.outcome == "completed" and execution.result == "ok"


def test_after_an_abort_every_step_write_is_refused(jobs: JobsEnv) -> None:
    codes: list[str] = []
    calls: list[str] = []

    def aborting(run: JobRun[Any]) -> None:
        run.step.run("before", lambda: "kept")
        run.signal.abort()
        for write in (
            lambda: run.step.run("after", lambda: calls.append("ran")),
            lambda: run.step.sleep("1m"),
            lambda: run.step.wait_for_event("ev", "x", timeout="1m"),
        ):
            try:
                write()
            except UltimateError as exc:
                codes.append(exc.code)

    queued = declare(aborting).enqueue({})
    run_jobs(clock=jobs.clock, advance=False)
    assert codes == ["X_ABORTED", "X_ABORTED", "X_ABORTED"]
    assert calls == []
    assert set(steps_of(jobs, queued.id)) == {"before"}


def test_current_signal_is_the_steps_inside_step_run_and_the_runs_in_the_body(jobs: JobsEnv) -> None:
    seen: dict[str, Any] = {}

    def signals(run: JobRun[Any]) -> None:
        seen["body"] = current_signal()
        run.step.run("s", lambda: seen.update(step=current_signal()) or None)
        seen["after"] = current_signal()

    declare(signals).enqueue({})
    run_jobs(clock=jobs.clock)
    assert current_signal() is None
    assert seen["body"] is not None and seen["after"] is seen["body"]
    assert seen["step"] is not None and seen["step"] is not seen["body"]
    seen["body"].abort()
    assert seen["step"].aborted  # a step's signal aborts with its run's


def test_step_atomic_is_refused_on_a_driver_whose_jobs_live_outside_django(jobs: JobsEnv) -> None:
    """The memory driver keeps its jobs outside Django's databases, as Redis does: no transaction could hold
    a step's writes with its checkpoint, so ``step.atomic`` is refused, terminally, before ``fn`` runs."""
    ran: list[int] = []
    queued = declare(lambda run: run.step.atomic("mark-paid", lambda: ran.append(1)), name="pay_in_memory").enqueue({})
    run_jobs(clock=jobs.clock)
    found = row(jobs, queued.id)
    assert (found.state, found.attempts, found.last_code) == ("dead", 1, "X_STEP_ATOMIC_UNSUPPORTED")
    assert "'memory' driver" in found.last_error and "run.step.run()" in found.last_error
    assert ran == []
