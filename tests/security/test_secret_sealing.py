"""Sealed secrets, end to end on each driver: the row holds envelopes, the body reads the clear values,
a sealed step output replays as the step returned it, and a ``SECRET_KEY`` rotation keeps pending jobs
runnable only when the old key is in ``SECRET_KEY_FALLBACKS`` — without it the job is dead-lettered on
its first attempt with ``X_JOB_SECRET_UNREADABLE``, saying what to do."""

from __future__ import annotations

import json
from typing import Any

from pydantic import SecretStr

from tests.conftest import AnyJobsEnv
from tests.security.payout import ALL_RENDERINGS, SECRETS, declare_payout, payout_input
from ultimate_jobs import operator
from ultimate_jobs.guards.sealing import is_envelope
from ultimate_jobs.testing import run_jobs

CLEAR = [SECRETS["api_key"], SECRETS["card"], SECRETS["backup"], SECRETS["header"]]


def stored_input(env: AnyJobsEnv, job_id: str) -> dict[str, Any]:
    operator_store = env.driver.operator
    assert operator_store is not None
    record = operator_store.get(job_id)
    assert record is not None
    return dict(record.input)


def test_the_row_holds_envelopes_and_the_body_reads_every_secret_in_clear(any_jobs: AnyJobsEnv) -> None:
    seen: list[dict[str, Any]] = []
    queued = declare_payout(seen, fail=False).enqueue(payout_input())

    stored = stored_input(any_jobs, queued.id)
    assert not [form for form in ALL_RENDERINGS if form in json.dumps(stored)]
    sealed = [stored["api_key"], stored["card"]["token"], stored["backups"][0], stored["headers"]["authorization"]]
    assert all(is_envelope(value) for value in sealed)
    assert (stored["org_id"], stored["payout_id"], stored["card"]["holder"]) == ("acme", 77, "Ada Lovelace")

    report = run_jobs(any_jobs.driver, clock=any_jobs.clock, queues=["payouts"])
    assert report.outcomes["completed"] == 1
    assert seen[0]["clear"] == CLEAR


def test_a_sealed_step_output_replays_as_the_step_returned_it(any_jobs: AnyJobsEnv) -> None:
    seen: list[dict[str, Any]] = []
    queued = declare_payout(seen, fail=True).enqueue(payout_input())
    run_jobs(any_jobs.driver, clock=any_jobs.clock, queues=["payouts"])

    first, replay = seen  # two attempts: the second replays both steps from their stored outputs
    assert (first["attempt"], replay["attempt"]) == (1, 2)
    assert replay["card"] == first["card"] == SecretStr(SECRETS["card"]) and isinstance(replay["card"], SecretStr)
    assert replay["signed"] == first["signed"] == {"header": f"Bearer {SECRETS['header']}", "nonce": 7}
    steps = {s.name: s.output for s in operator.inspect_job(queued.id).steps}
    assert steps == {"authorize": "**********", "sign": {"header": "**********", "nonce": 7}}


def test_a_key_rotated_with_the_old_key_in_fallbacks_still_runs_a_pending_job(
    any_jobs: AnyJobsEnv, settings: Any
) -> None:
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = "the-old-site-key", []
    seen: list[dict[str, Any]] = []
    declare_payout(seen, fail=False).enqueue(payout_input())

    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = "the-new-site-key", ["the-old-site-key"]
    report = run_jobs(any_jobs.driver, clock=any_jobs.clock, queues=["payouts"])
    assert report.outcomes["completed"] == 1 and seen[0]["clear"] == CLEAR


def test_a_key_rotated_without_the_old_key_dead_letters_on_the_first_attempt_saying_what_to_do(
    any_jobs: AnyJobsEnv, settings: Any
) -> None:
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = "the-old-site-key", []
    seen: list[dict[str, Any]] = []
    queued = declare_payout(seen, fail=False, attempts=5).enqueue(payout_input())

    settings.SECRET_KEY = "the-new-site-key"
    report = run_jobs(any_jobs.driver, clock=any_jobs.clock, queues=["payouts"])
    assert report.outcomes["dead-lettered"] == 1 and seen == []  # the body never ran
    detail = operator.inspect_job(queued.id)
    assert detail.job.state == "dead" and detail.job.attempts == 1
    assert detail.error is not None and detail.error.code == "X_JOB_SECRET_UNREADABLE"
    assert "SECRET_KEY_FALLBACKS" in detail.error.message and "Fix:" in detail.error.message
    assert "the secret sealed at $." in detail.error.message  # names the first one it could not open

    settings.SECRET_KEY_FALLBACKS = ["the-old-site-key"]  # the fix the message names, then a retry
    operator.retry_job(queued.id)
    assert run_jobs(any_jobs.driver, clock=any_jobs.clock, queues=["payouts"]).outcomes["completed"] == 1
    assert seen[0]["clear"] == CLEAR
