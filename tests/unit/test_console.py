"""The console a role command prints by default: an outcome line per attempt with its traceback, the
loud unknown-job line, JSON lines on request, the start line; and ``jobs show``/``retry``/``cancel``/
``promote``/``remove`` taking the short id a line prints, or a unique start of an id."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from tests.conftest import JobsEnv
from tests.helpers import command
from ultimate_jobs import JobRun, job
from ultimate_jobs.core.ids import short_id
from ultimate_jobs.core.routing import jobs_router
from ultimate_jobs.integration.console import ConsoleFormatter, JsonFormatter, install_console, worker_start_line
from ultimate_jobs.testing import run_jobs
from ultimate_jobs.testing.conformance_support import minted_id, one_millisecond
from ultimate_jobs.worker import job_worker


@pytest.fixture
def console() -> Iterator[io.StringIO]:
    """The console handler on a buffer; the logger's handlers and level put back afterwards."""
    logger = logging.getLogger("ultimate_jobs")
    root = logging.getLogger()
    handlers, level, root_handlers = list(logger.handlers), logger.level, list(root.handlers)
    for handler in root_handlers:  # pytest's capture handler would read as the app routing logs
        root.removeHandler(handler)
    out = io.StringIO()
    try:
        assert install_console(verbosity=1, stream=out)
        yield out
    finally:
        install_console(verbosity=1, log_format="json", stream=io.StringIO())  # replace ours, then drop it
        logger.handlers[:] = handlers
        logger.setLevel(level)
        for handler in root_handlers:
            root.addHandler(handler)


def test_each_attempt_outcome_is_one_line_with_name_id_duration_and_attempt(
    jobs: JobsEnv, console: io.StringIO
) -> None:
    @job(idempotency_key=lambda i: i["k"], tenant="none", retry={"attempts": 2, "delay": "1s"})
    def flaky_charge(run: JobRun[Any]) -> None:
        if run.input["k"] == "bad":
            raise ValueError("card declined")

    good = flaky_charge.enqueue({"k": "good"})
    bad = flaky_charge.enqueue({"k": "bad"})
    run_jobs(jobs.driver, clock=jobs.clock)
    lines = console.getvalue().splitlines()
    completed = [line for line in lines if " completed " in line]
    assert len(completed) == 1 and f"flaky_charge {short_id(good.id)} 0 ms attempt 1/2" in completed[0]
    retried = next(line for line in lines if " retried " in line)
    assert f"flaky_charge {short_id(bad.id)}" in retried and "attempt 1/2 — retry in" in retried
    assert retried.endswith(": card declined")
    dead = next(line for line in lines if " dead-lettered " in line)
    assert "attempt 2/2: card declined" in dead
    tracebacks = [line for line in lines if line.startswith("    ")]
    assert any("ValueError: card declined" in line for line in tracebacks)
    assert any("test_console.py" in line for line in tracebacks)
    assert not any("ultimate_jobs/execute.py" in line for line in tracebacks)  # starts at the body's frame


@pytest.mark.parametrize("debug", [False, True], ids=["production", "development"])
def test_a_row_whose_job_the_worker_does_not_know_is_a_loud_line(
    jobs: JobsEnv, console: io.StringIO, debug: bool
) -> None:
    @job(idempotency_key=lambda i: "x", tenant="none")
    def renamed_since(run: JobRun[Any]) -> None:
        return None

    enqueued = renamed_since.enqueue({})
    from ultimate_jobs.core import registry

    registry.unregister("renamed_since")  # as if declared after the worker started: this process never loaded it
    with override_settings(DEBUG=debug):
        run_jobs(jobs.driver, clock=jobs.clock, advance=False)
    (line,) = [line for line in console.getvalue().splitlines() if "UNKNOWN JOB" in line]
    assert "'renamed_since'" in line and f"(id {short_id(enqueued.id)}," in line and "deploy the module" in line
    # In development (DEBUG on) the fix for a job added while the worker runs is a restart, or jobs_dev --reload.
    dev_hint = "restart it, or run python manage.py jobs_dev --reload"
    assert (dev_hint in line) is debug, line
    assert line.endswith("the row waits and is offered again in a minute")


def test_json_format_is_one_object_per_record() -> None:
    record = logging.LogRecord("ultimate_jobs", logging.INFO, __file__, 1, "jobs.job.completed", None, None)
    record.event = "jobs.job.completed"
    record.jobs = {"name": "n", "job_id": "i", "attempt": 1, "max_attempts": 3, "duration_ms": 4}
    body = json.loads(JsonFormatter().format(record))
    assert body["event"] == "jobs.job.completed" and body["level"] == "info" and body["duration_ms"] == 4
    assert "completed" in ConsoleFormatter().format(record) and "attempt 1/3" in ConsoleFormatter().format(record)


def test_text_steps_aside_when_the_app_routes_logs_and_json_always_installs() -> None:
    logger = logging.getLogger("ultimate_jobs")
    before = list(logger.handlers)
    routed = logging.StreamHandler(io.StringIO())
    logger.addHandler(routed)
    try:
        assert install_console(verbosity=1, log_format="text", stream=io.StringIO()) is False
        assert install_console(verbosity=1, log_format="json", stream=io.StringIO()) is True
    finally:
        logger.handlers[:] = before


def test_the_start_line_names_driver_queues_and_slots(jobs: JobsEnv) -> None:
    # the async slots said outright: by default a queue some async job names (a test module's) gets 100
    worker = job_worker(
        driver=jobs.driver,
        context=lambda: None,
        queues=["default", "emails"],
        concurrency=3,
        async_concurrency={"default": 0, "emails": 20},
    )
    line = worker_start_line(worker)
    assert line.startswith(f"worker {worker.worker_id} serving default (3 slots), emails (3 slots, 20 async)")
    assert "driver memory" in line


def test_show_retry_and_cancel_take_a_unique_id_prefix(jobs: JobsEnv) -> None:
    @job(idempotency_key=lambda i: i["k"], tenant="none")
    def prefixed(run: JobRun[Any]) -> None:
        return None

    router = jobs_router()
    first = router.enqueue(prefixed.build_request({"k": "a"}, id="0badcafe-0000-7000-8000-00000000000a"))
    second = router.enqueue(prefixed.build_request({"k": "b"}, id="0badcafe-0000-7000-8000-00000000000b"))
    for prefix in ("0badcafe-0000-7000-8000-00000000000a", "0BADCAFE-0000-7000-8000-00000000000A"):
        assert command("jobs", "show", prefix, "--json").json["id"] == first.id
    ambiguous = command("jobs", "show", "0badcafe-0000-7000-8000-00000000000", "--json")  # the start of both
    assert ambiguous.code == 1 and ambiguous.json["error"]["code"] == "X_JOB_ID_AMBIGUOUS"
    assert ambiguous.json["error"]["meta"]["matches"] == [second.id, first.id]  # newest first
    router.enqueue(prefixed.build_request({"k": "c"}, id="1ce0cafe-0000-7000-8000-00000000000c"))
    cancelled = command("jobs", "cancel", "1ce0", "--json")
    assert cancelled.code == 0 and cancelled.json["job"]["id"].startswith("1ce0cafe")
    assert cancelled.json["job"]["state"] == "cancelled"
    retried = command("jobs", "retry", "1CE0CA", "--json")
    assert retried.code == 0 and retried.json["job"]["state"] == "ready"
    missing = command("jobs", "show", "ffff", "--json")
    assert missing.code == 1 and missing.json["error"]["code"] == "X_JOB_NOT_FOUND"
    invalid = command("jobs", "show", "zz", "--json")
    assert invalid.code == 1 and invalid.json["error"]["code"] == "X_JOB_ID_INVALID"


def test_each_job_of_a_burst_is_shown_by_the_short_id_its_line_printed(jobs: JobsEnv, console: io.StringIO) -> None:
    @job(idempotency_key=lambda i: i["k"], tenant="none")
    def burst_job(run: JobRun[Any]) -> None:
        return None

    router = jobs_router()
    with one_millisecond():  # ids as a driver mints them, all in one millisecond: they share their start
        ids = [router.enqueue(burst_job.build_request({"k": f"k{n}"}, id=minted_id())).id for n in range(50)]
    run_jobs(jobs.driver, clock=jobs.clock)
    printed = [line.split()[3] for line in console.getvalue().splitlines() if " completed " in line]
    assert sorted(printed) == sorted(short_id(job_id) for job_id in ids)
    for short in printed:
        shown = command("jobs", "show", short, "--json")
        assert shown.code == 0 and short_id(shown.json["id"]) == short, shown
    start = ids[0][:8]  # what a console that printed the start of an id showed: every job of the burst has it
    ambiguous = command("jobs", "show", start, "--json")
    assert ambiguous.code == 1 and ambiguous.json["error"]["code"] == "X_JOB_ID_AMBIGUOUS"
    assert len(ambiguous.json["error"]["meta"]["matches"]) == 5 and "and more" in ambiguous.json["error"]["message"]


def test_the_end_of_an_id_names_a_job_for_every_one_job_command_and_a_part_of_several_is_listed(
    jobs: JobsEnv,
) -> None:
    @job(idempotency_key=lambda i: i["k"], tenant="none")
    def tailed(run: JobRun[Any]) -> None:
        return None

    router = jobs_router()
    first = router.enqueue(tailed.build_request({"k": "a"}, id="0badcafe-0000-7000-8000-0000c0ffee01")).id
    second = router.enqueue(tailed.build_request({"k": "b"}, id="1badcafe-0000-7000-8000-0000c0ffee02")).id
    third = router.enqueue(tailed.build_request({"k": "c"}, id="2badcafe-0000-7000-8000-00000fee0bad")).id
    assert command("jobs", "show", "0000C0FFEE01", "--json").json["id"] == first  # either case
    assert command("jobs", "show", "8000-0000c0ffee02", "--json").json["id"] == second  # dashed where the id is
    both = command("jobs", "show", "0bad", "--json")  # the start of the first, the end of the third
    assert both.code == 1 and both.json["error"]["code"] == "X_JOB_ID_AMBIGUOUS"
    assert both.json["error"]["meta"]["matches"] == [third, first]  # newest first (one instant: by id)
    assert f"{first} (tailed, ready)" in both.json["error"]["message"]
    assert command("jobs", "cancel", "c0ffee02", "--json").json["job"]["state"] == "cancelled"
    assert command("jobs", "remove", "c0ffee02", "--json").json == {"action": "remove", "id": second, "job": None}
    assert command("jobs", "promote", "fee0bad", "--json").json["error"]["code"] == "X_JOB_NOT_PROMOTABLE"
    missing = command("jobs", "show", "cafe", "--json")  # a start and an end that no id has
    assert missing.code == 1 and missing.json["error"]["code"] == "X_JOB_NOT_FOUND"
    assert "no job id starts or ends with 'cafe'" in missing.json["error"]["message"]
    nothing = command("jobs", "show", "0000c0ffee-01", "--json")  # no id is dashed there
    assert nothing.code == 1 and nothing.json["error"]["code"] == "X_JOB_ID_INVALID"
