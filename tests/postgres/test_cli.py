"""``manage.py jobs``: every subcommand through the real ``call_command`` against Postgres, in both
output forms, and every error code the surface answers with its exit code.

Under ``call_command`` a non-zero exit is a ``CommandError`` carrying ``returncode`` (1: an operator
error, 2: usage), raised after the command printed its output; on the command line the process exits
with that code — the last test runs ``manage.py`` for real to hold it to that.
"""

from __future__ import annotations

import io
import json
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pydantic
import pytest

from tests.conftest import Env, installed
from tests.helpers import Result, command, manage_py
from ultimate_jobs import JobRun, job, task
from ultimate_jobs.contracts.operator import MAX_BULK_ROWS, JobFilter, QueueStats, WorkerInfo
from ultimate_jobs.contracts.schedules import Fire
from ultimate_jobs.core.definition import JobHandle
from ultimate_jobs.core.ids import short_id
from ultimate_jobs.core.installed import set_job_driver
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.guards.redaction import MASK
from ultimate_jobs.guards.sealing import is_envelope
from ultimate_jobs.testing import FrozenClock, run_jobs
from ultimate_jobs.testing.conformance import request
from ultimate_jobs.testing.conformance_support import one_millisecond

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

TOKEN = "tok-cli-5f4e3d2c1b"
UNKNOWN = "00000000-0000-4000-8000-000000000000"


class TtyIO(io.StringIO):
    """A stderr that says it is a terminal, so the progress bar redraws in place."""

    def isatty(self) -> bool:
        return True


def jobs_cli(*args: str, err: io.StringIO | None = None) -> Result:
    return command("jobs", *args, err=err)


def refused(code: str, *args: str) -> tuple[Result, Result]:
    """Run a subcommand that must fail with ``code`` in both forms; answers (human, json)."""
    human = jobs_cli(*args)
    assert human.code == 1, human
    assert human.out == ""
    assert human.err.startswith(f"{code}: ") and "\nFix: " in human.err, human.err
    as_json = jobs_cli(*args, "--json")
    assert as_json.code == 1 and as_json.err == ""
    error = as_json.json["error"]
    assert error["code"] == code and set(error) == {"code", "message", "meta", "fix"} and error["fix"]
    return human, as_json


def usage(*args: str) -> Result:
    result = jobs_cli(*args)
    assert result.code == 2 and result.out == "", result
    assert result.err.startswith("Error: ")
    return result


@pytest.fixture
def pg() -> Iterator[Env[PostgresDriver]]:
    clock = FrozenClock()
    with installed(clock, PostgresDriver(clock=clock)) as env:
        yield env


class Hook(pydantic.BaseModel):
    url: str
    token: pydantic.SecretStr


@pytest.fixture
def jobs_declared(pg: Env[PostgresDriver]) -> dict[str, JobHandle[Any, Any]]:
    @job(name="cli.steps", idempotency_key=lambda i: f"steps:{i['n']}", tenant="none", retry={"attempts": 1})
    def steps(run: JobRun[dict[str, Any]]) -> None:
        run.step.run("first", lambda: 1)
        run.step.run("second", lambda: 2)
        if run.input.get("fail"):
            raise RuntimeError("second step went wrong")

    @job(name="cli.hook", input=Hook, idempotency_key=lambda i: f"hook:{i.url}", tenant="none", retry={"attempts": 1})
    def hook(run: JobRun[Hook]) -> None:
        token = run.input.token.get_secret_value()
        run.step.run("sign", lambda: f"Bearer {token}")
        raise RuntimeError(f"refused {token}")

    return {"steps": steps, "hook": hook}


def dead_job(pg: Env[PostgresDriver], handle: JobHandle[Any, Any], n: int = 1) -> str:
    queued = handle.enqueue({"n": n, "fail": True})
    run_jobs(pg.driver, clock=pg.clock)
    return queued.id


# -- list --------------------------------------------------------------------------------------


def test_list_in_both_forms_with_filters_and_cursors(
    pg: Env[PostgresDriver], jobs_declared: dict[str, JobHandle[Any, Any]]
) -> None:
    ids = []
    for n in range(3):
        ids.append(jobs_declared["steps"].enqueue({"n": n}).id)
        pg.clock.advance(1)
    human = jobs_cli("list", "--name", "cli.steps", "--limit", "2")
    assert human.code == 0 and human.err == ""
    lines = human.out.splitlines()
    assert lines[0].split() == [
        "ID",
        "NAME",
        "QUEUE",
        "STATE",
        "ATTEMPT",
        "TENANT",
        "RUN",
        "AT",
        "CREATED",
        "FINISHED",
        "LAST",
        "ERROR",
    ]
    assert ids[2] in lines[1] and ids[1] in lines[2] and "ready" in lines[1] and "0/1" in lines[1]
    assert "older:  python manage.py jobs list --name cli.steps --limit 2 --after jc1." in human.out

    first = jobs_cli("list", "--name", "cli.steps", "--limit", "2", "--json").json
    assert [r["id"] for r in first["rows"]] == [ids[2], ids[1]] and first["previous"] is None
    assert set(first["rows"][0]) >= {"id", "name", "queue", "state", "input", "last_code", "progress"}
    second = jobs_cli("list", "--name", "cli.steps", "--limit", "2", "--after", first["next"], "--json").json
    assert [r["id"] for r in second["rows"]] == [ids[0]] and second["next"] is None
    back = jobs_cli("list", "--name", "cli.steps", "--limit", "2", "--before", second["previous"], "--json").json
    assert [r["id"] for r in back["rows"]] == [ids[2], ids[1]]

    assert jobs_cli("list", "--state", "dead", "--json").json["rows"] == []
    assert jobs_cli("list", "--state", "dead").out.strip() == "no jobs match."
    assert [r["id"] for r in jobs_cli("list", "--id-prefix", ids[0][:13], "--json").json["rows"]] == [ids[0]]
    created = first["rows"][1]["created_at_ms"]
    window = jobs_cli("list", "--created-from", str(created), "--created-to", str(created + 1), "--json")
    assert [r["id"] for r in window.json["rows"]] == [ids[1]]
    assert jobs_cli("list", "--queue", "nowhere", "--tenant", "org-x", "--json").json["rows"] == []
    iso = jobs_cli("list", "--created-from", "2000-01-01", "--created-to", "2000-01-02T00:00:00Z", "--json")
    assert iso.json["rows"] == []


def test_list_sorted_and_counted_in_both_forms(
    pg: Env[PostgresDriver], jobs_declared: dict[str, JobHandle[Any, Any]]
) -> None:
    failed = dead_job(pg, jobs_declared["steps"], n=9)  # one attempt, finished
    live = [jobs_declared["steps"].enqueue({"n": 0}).id]
    live.append(jobs_declared["hook"].enqueue({"url": "https://partner.test", "token": TOKEN}).id)
    by_name = jobs_cli("list", "--order", "name", "--count", "--json").json
    assert [r["name"] for r in by_name["rows"]] == ["cli.hook", "cli.steps", "cli.steps"]
    assert by_name["order"] == "name" and by_name["window"] is None
    assert by_name["count"] == {"rows": 3, "basis": "count", "exact": True, "text": "3"}
    finished = jobs_cli("list", "--order=-finished", "--count", "--json").json
    assert [r["id"] for r in finished["rows"]] == [failed] and finished["count"]["rows"] == 1
    most = jobs_cli("list", "--order=-attempts", "--limit", "1", "--json").json
    assert [r["id"] for r in most["rows"]] == [failed]
    rest = jobs_cli("list", "--order=-attempts", "--limit", "1", "--after", most["next"], "--json").json
    assert rest["rows"][0]["id"] in live and rest["order"] == "-attempts"
    human = jobs_cli("list", "--order", "queue", "--limit", "1", "--count")
    assert "1 row (3 match), sorted by queue." in human.out
    assert "next:  python manage.py jobs list --limit 1 --order=queue --after jc1." in human.out
    # a cursor of one order is refused by a list of another
    _, mixed = refused("X_JOB_PAGE_INVALID", "list", "--order", "name", "--after", most["next"])
    assert mixed.json["error"]["meta"]["cursor"] == "after"
    assert "invalid choice" in usage("list", "--order", "priority").err


def test_list_refusals(pg: Env[PostgresDriver]) -> None:
    human, as_json = refused("X_JOB_PAGE_INVALID", "list", "--limit", "201")
    assert "Fix: python manage.py jobs list --limit 200 --json" in human.err
    assert as_json.json["error"]["meta"] == {"limit": 201}
    _, cursor = refused("X_JOB_PAGE_INVALID", "list", "--after", "jc1.bogus")
    assert cursor.json["error"]["meta"] == {"cursor": "after"}
    usage("list", "--state", "sleeping")
    usage("list", "--limit", "many")
    usage("list", "--after", "a", "--before", "b")
    assert "is not an instant" in usage("list", "--created-from", "yesterday").err


# -- show --------------------------------------------------------------------------------------


def test_show_in_both_forms_redacts_and_traces(
    pg: Env[PostgresDriver], jobs_declared: dict[str, JobHandle[Any, Any]]
) -> None:
    queued = jobs_declared["hook"].enqueue({"url": "https://partner.test", "token": TOKEN})
    stored = pg.driver.operator.get(queued.id)
    assert is_envelope(stored.input["token"]) and TOKEN not in json.dumps(stored.input)  # stored sealed
    run_jobs(pg.driver, clock=pg.clock)

    human = jobs_cli("show", queued.id)
    assert human.code == 0 and TOKEN not in human.out
    assert f"job          {queued.id}" in human.out and "state        dead (attempt 1 of 1)" in human.out
    assert f'"token": "{MASK}"' in human.out and f"RuntimeError: refused {MASK}" in human.out
    assert "sign" in human.out and "Traceback" in human.out and "backfill     -" in human.out  # ran no backfill

    data = jobs_cli("show", queued.id, "--json").json
    assert TOKEN not in json.dumps(data)
    assert data["input"] == {"url": "https://partner.test", "token": MASK}
    assert data["steps"][0]["name"] == "sign" and data["steps"][0]["output"] == MASK  # it quoted the secret: sealed
    assert data["error"]["message"] == f"RuntimeError: refused {MASK}" and data["backfill"] is None
    assert TOKEN not in jobs_cli("list", "--json").out
    listed = jobs_cli("list", "--state", "dead").out
    assert TOKEN not in listed and f"RuntimeError: refused {MASK}" in listed  # the LAST ERROR column


def test_show_unknown_is_not_found(pg: Env[PostgresDriver]) -> None:
    human, as_json = refused("X_JOB_NOT_FOUND", "show", UNKNOWN)
    assert "Fix: python manage.py jobs list --json" in human.err
    assert as_json.json["error"]["meta"] == {"job_id": UNKNOWN}
    refused("X_JOB_ID_INVALID", "show", "not-a-uuid")
    usage("show")


def test_each_job_of_a_burst_enqueued_in_one_millisecond_is_named_by_its_short_id(pg: Env[PostgresDriver]) -> None:
    with one_millisecond():  # the driver mints every id of the batch in the same millisecond
        burst = [answer.id for answer in pg.driver.enqueue_many([request("cli.raw", queue="raw") for _ in range(50)])]
    assert len({job_id[:15] for job_id in burst}) == 1
    for job_id in burst:
        assert jobs_cli("show", short_id(job_id), "--json").json["id"] == job_id
    _, ambiguous = refused("X_JOB_ID_AMBIGUOUS", "show", burst[0][:8])  # the start every id of the burst has
    assert len(ambiguous.json["error"]["meta"]["matches"]) == 5
    assert jobs_cli("cancel", short_id(burst[7]), "--json").json["id"] == burst[7]


# -- one job -----------------------------------------------------------------------------------


def test_retry_in_both_forms_and_its_refusals(
    pg: Env[PostgresDriver], jobs_declared: dict[str, JobHandle[Any, Any]]
) -> None:
    steps = jobs_declared["steps"]
    dead = dead_job(pg, steps)
    human = jobs_cli("retry", dead)
    assert human.code == 0 and human.out.startswith(f"retried {dead} (cli.steps): ready on queue default")
    _, live = refused("X_JOB_NOT_REQUEUEABLE", "retry", dead)
    assert live.json["error"]["meta"] == {"job_id": dead, "state": "ready"}

    run_jobs(pg.driver, clock=pg.clock)  # dead again, with both steps stored
    again = jobs_cli("retry", dead, "--from-step", "second", "--json").json
    assert again["action"] == "retry" and again["id"] == dead and again["job"]["state"] == "ready"
    assert [s["name"] for s in jobs_cli("show", dead, "--json").json["steps"]] == ["first"]
    run_jobs(pg.driver, clock=pg.clock)

    refused("X_JOB_NOT_FOUND", "retry", UNKNOWN)
    _, no_step = refused("X_JOB_NOT_FOUND", "retry", dead, "--from-step", "never")
    assert no_step.json["error"]["meta"] == {"job_id": dead, "step": "never"}
    steps.enqueue({"n": 1})  # a live job takes the dead one's key
    _, duplicate = refused("X_JOB_DUPLICATE", "retry", dead)
    assert duplicate.json["error"]["meta"]["job_id"] == dead


def test_cancel_in_both_forms_and_not_cancellable(
    pg: Env[PostgresDriver], jobs_declared: dict[str, JobHandle[Any, Any]]
) -> None:
    first = jobs_declared["steps"].enqueue({"n": 1}).id
    second = jobs_declared["steps"].enqueue({"n": 2}).id
    assert jobs_cli("cancel", first, "--reason", "runaway").out.startswith(f"cancelled {first} (cli.steps): cancelled")
    data = jobs_cli("cancel", second, "--json").json
    assert data["job"]["state"] == "cancelled" and data["job"]["last_error"] == "cancelled: by an operator"
    human, as_json = refused("X_JOB_NOT_CANCELLABLE", "cancel", first)
    assert f"job {first} is cancelled" in human.err
    assert as_json.json["error"]["meta"] == {"job_id": first, "state": "cancelled"}
    _, unknown = refused("X_JOB_NOT_CANCELLABLE", "cancel", UNKNOWN)
    assert unknown.json["error"]["meta"]["state"] is None


def test_remove_in_both_forms_and_not_removable(
    pg: Env[PostgresDriver], jobs_declared: dict[str, JobHandle[Any, Any]]
) -> None:
    first = jobs_declared["steps"].enqueue({"n": 1}).id
    second = jobs_declared["steps"].enqueue({"n": 2}).id
    assert jobs_cli("remove", first).out.strip() == f"removed {first}"
    assert jobs_cli("remove", second, "--json").json == {"action": "remove", "id": second, "job": None}
    refused("X_JOB_NOT_FOUND", "remove", first)
    running = pg.driver.enqueue(request("cli.raw", queue="raw")).id
    assert pg.driver.claim(queues=["raw"], limit=1, worker_id="w").jobs[0].id == running
    human, _ = refused("X_JOB_NOT_REMOVABLE", "remove", running)
    assert f"Fix: python manage.py jobs cancel {running} --json" in human.err


def test_promote_in_both_forms_and_not_promotable(
    pg: Env[PostgresDriver], jobs_declared: dict[str, JobHandle[Any, Any]]
) -> None:
    first = jobs_declared["steps"].enqueue({"n": 1}, delay="1h").id
    second = jobs_declared["steps"].enqueue({"n": 2}, delay="1h").id
    assert jobs_cli("promote", first).out.startswith(f"promoted {first} (cli.steps): ready")
    data = jobs_cli("promote", second, "--json").json
    assert data["job"]["state"] == "ready" and data["job"]["run_at_ms"] == pg.clock.now_ms()
    _, as_json = refused("X_JOB_NOT_PROMOTABLE", "promote", first)
    assert as_json.json["error"]["meta"] == {"job_id": first, "state": "ready"}
    refused("X_JOB_NOT_FOUND", "promote", UNKNOWN)


# -- bulk --------------------------------------------------------------------------------------


def test_bulk_loops_until_nothing_remains_with_a_progress_bar(pg: Env[PostgresDriver]) -> None:
    total = MAX_BULK_ROWS + 7
    later = pg.clock.now_ms() + 60_000
    pg.driver.enqueue_many([request("cli.bulk", queue="bulk", run_at_ms=later) for _ in range(total)])

    human = jobs_cli("promote-many", "--state", "delayed", "--queue", "bulk")
    assert human.code == 0
    assert human.err.splitlines() == [
        f"promote-many [{'#' * 29}.] {MAX_BULK_ROWS}/{total}",  # the bar is full only when nothing remains
        f"promote-many [{'#' * 30}] {total}/{total}",
    ]
    assert human.out.strip() == f"promote-many [state=delayed, queue=bulk]: {total} rows in 2 calls; 0 remaining"

    for row in pg.driver.operator.list(JobFilter(limit=5)).rows:
        pg.driver.operator.cancel(row.id)
    tty = TtyIO()
    requeued = jobs_cli("requeue-many", "--state", "cancelled", "--name", "cli.bulk", err=tty)
    assert requeued.err == f"\rrequeue-many [{'#' * 30}] 5/5\n"
    data = jobs_cli("remove-many", "--state", "ready", "--queue", "bulk", "--json")
    assert data.err == ""
    assert data.json == {
        "action": "remove-many",
        "filter": {"state": "ready", "queue": "bulk"},
        "affected": total,
        "remaining": 0,
        "calls": 2,
    }
    assert jobs_cli("requeue-many", "--state", "dead", "--tenant", "org-none", "--json").json["calls"] == 1


def test_bulk_refusals(pg: Env[PostgresDriver]) -> None:
    _, as_json = refused("X_JOB_NOT_REQUEUEABLE", "requeue-many", "--state", "ready")
    assert as_json.json["error"]["meta"] == {"state": "ready"}
    refused("X_JOB_NOT_REMOVABLE", "remove-many", "--state", "running")
    refused("X_JOB_NOT_PROMOTABLE", "promote-many", "--state", "done")
    usage("requeue-many")
    usage("remove-many", "--state", "gone")


# -- pauses ------------------------------------------------------------------------------------


def test_pause_and_resume_queues_and_tasks(
    pg: Env[PostgresDriver], jobs_declared: dict[str, JobHandle[Any, Any]]
) -> None:
    @task(name="cli.nightly", cron="0 3 * * *", tz="UTC")
    def nightly(occurrence_ms: int) -> Sequence[Any]:
        return [(jobs_declared["steps"], {"n": occurrence_ms})]

    paused = jobs_cli("pause", "default")
    assert (paused.out.strip(), paused.err) == ("paused queue default", "")
    assert pg.driver.operator.paused_queues() == ["default"]
    typo = jobs_cli("pause", "defualt")
    assert "declares no queue named 'defualt'" in typo.err
    assert jobs_cli("resume", "defualt", "--json").json == {
        "kind": "queue",
        "name": "defualt",
        "paused": False,
        "declared": False,
    }
    assert jobs_cli("resume", "default").out.strip() == "resumed queue default"
    assert pg.driver.operator.paused_queues() == []

    assert jobs_cli("pause-task", "cli.nightly").out.strip() == "paused task cli.nightly"
    assert jobs_cli("pause-task", "cli.nightly", "--json").json["declared"] is True
    assert pg.driver.operator.paused_tasks() == ["cli.nightly"]
    assert jobs_cli("resume-task", "cli.nightly", "--json").json["paused"] is False
    assert jobs_cli("resume-task", "cli.nightly").out.strip() == "resumed task cli.nightly"
    assert pg.driver.operator.paused_tasks() == []
    usage("pause")
    usage("pause-task")


# -- fleet views -------------------------------------------------------------------------------


def test_workers_in_both_forms(pg: Env[PostgresDriver]) -> None:
    assert jobs_cli("workers").out.strip() == "no live workers."
    now = pg.clock.now_ms()
    pg.driver.record_worker(WorkerInfo("w-cli", "host-a", 4242, now, ("default", "mail"), 8, ("j1",), now))
    human = jobs_cli("workers").out.splitlines()
    assert human[0].split()[:4] == ["ID", "HOST", "PID", "QUEUES"] and "w-cli" in human[1]
    assert "default,mail" in human[1]
    [worker] = jobs_cli("workers", "--json").json["workers"]
    assert worker["id"] == "w-cli" and worker["in_flight"] == ["j1"] and worker["slots"] == 8


def test_queues_in_both_forms(pg: Env[PostgresDriver], jobs_declared: dict[str, JobHandle[Any, Any]]) -> None:
    dead_job(pg, jobs_declared["steps"], n=2)
    jobs_declared["steps"].enqueue({"n": 1})
    jobs_cli("pause", "default")
    rows = {q["queue"]: q for q in jobs_cli("queues", "--json").json["queues"]}
    assert rows["default"]["dead"] == 1 and rows["default"]["paused"] is True and rows["default"]["declared"]
    assert rows["default"]["ready"] == 1 and rows["default"]["oldest_ready_ms"] == pg.clock.now_ms()
    human = jobs_cli("queues").out.splitlines()
    assert human[0].split()[0] == "QUEUE" and any(line.startswith("default") and "yes" in line for line in human)


def test_tasks_in_both_forms(pg: Env[PostgresDriver], jobs_declared: dict[str, JobHandle[Any, Any]]) -> None:
    @task(name="cli.hourly", cron="0 * * * *", tz="Europe/Paris")
    def hourly(occurrence_ms: int) -> Sequence[Any]:
        return [(jobs_declared["steps"], {"n": occurrence_ms})]

    occurrence = pg.clock.now_ms() - 1000
    pg.driver.scheduler_state.load(["cli.hourly"], now_ms=occurrence - 1)
    fire = Fire("cli.hourly", occurrence - 1, occurrence, occurrence, [], pg.clock.now_ms())
    assert pg.driver.scheduler_state.fire(fire).outcome == "fired"
    jobs_cli("pause-task", "cli.gone")
    rows = {t["name"]: t for t in jobs_cli("tasks", "--json").json["tasks"]}
    assert rows["cli.hourly"]["jobs"] == ["cli.steps"] and rows["cli.hourly"]["tz"] == "Europe/Paris"
    assert rows["cli.hourly"]["next_run_ms"] == hourly.next_run(pg.clock.now_ms())
    assert rows["cli.hourly"]["last_occurrence_ms"] == pg.clock.now_ms() - 1000
    assert rows["cli.gone"]["declared"] is False and rows["cli.gone"]["paused"] is True
    human = jobs_cli("tasks").out
    assert "cli.hourly" in human and "0 * * * *" in human and "(not declared)" in human


def test_manifest_in_both_forms_and_written(
    pg: Env[PostgresDriver],
    jobs_declared: dict[str, JobHandle[Any, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = jobs_cli("manifest", "--json").json
    names = [j["name"] for j in data["jobs"]]
    assert names == sorted(names) and {"cli.steps", "cli.hook"} <= set(names)
    hook = next(j for j in data["jobs"] if j["name"] == "cli.hook")
    assert hook["input_schema"]["properties"]["token"]["writeOnly"] is True
    human = jobs_cli("manifest").out
    assert human.splitlines()[0].split()[:3] == ["JOB", "QUEUE", "TENANT"] and "cli.steps" in human

    monkeypatch.chdir(tmp_path)
    written = jobs_cli("manifest", "--write")
    assert written.out.startswith("wrote x.manifest.json: ")
    text = (tmp_path / "x.manifest.json").read_text()
    assert json.loads(text) == data and text.endswith("\n")
    other = jobs_cli("manifest", "--write", str(tmp_path / "other.json"), "--json").json
    assert other == {"path": str(tmp_path / "other.json"), "jobs": len(data["jobs"]), "tasks": len(data["tasks"])}
    assert (tmp_path / "other.json").read_text() == text  # the same declarations write the same bytes


def test_stats_in_both_forms(pg: Env[PostgresDriver], jobs_declared: dict[str, JobHandle[Any, Any]]) -> None:
    jobs_declared["steps"].enqueue({"n": 1})
    dead_job(pg, jobs_declared["steps"], n=2)
    data = jobs_cli("stats", "--since", "1h", "--json").json
    [steps] = [j for j in data["jobs"] if j["job"] == "cli.steps"]
    assert (steps["done"], steps["dead"]) == (1, 1) and data["total"]["done"] >= 1
    assert data["until_ms"] - data["since_ms"] == 3_600_000
    human = jobs_cli("stats").out
    assert human.startswith("settles since ") and "(24h)" in human and "cli.steps" in human and "(all)" in human
    usage("stats", "--since", "soon")


# -- a driver without the operator surface ------------------------------------------------------


class BareDriver:
    """A hand-rolled driver declaring no wake and no optional store."""

    name = "bare"
    alias = None
    visibility_timeout_ms = 30_000
    supports_wake = False
    supports_listen = False
    operator = None
    leases = None
    leader = None
    scheduler_state = None
    backfills = None

    def stats(self) -> list[QueueStats]:
        return []


def test_a_driver_without_an_operator_store(pg: Env[PostgresDriver]) -> None:
    set_job_driver(BareDriver())  # type: ignore[arg-type]
    _, as_json = refused("X_NOT_IMPLEMENTED", "list")
    assert as_json.json["error"]["meta"] == {"driver": "bare", "capability": "list"}
    refused("X_NOT_IMPLEMENTED", "show", UNKNOWN)
    refused("X_NOT_IMPLEMENTED", "requeue-many", "--state", "dead")
    refused("X_NOT_IMPLEMENTED", "workers")
    refused("X_JOB_NOT_CANCELLABLE", "cancel", UNKNOWN)
    assert jobs_cli("queues", "--json").json["queues"][0]["ready"] == 0


# -- the command line itself -------------------------------------------------------------------


@pytest.mark.slow
def test_the_process_exit_codes(pg: Env[PostgresDriver], jobs_declared: dict[str, JobHandle[Any, Any]]) -> None:
    dead = dead_job(pg, jobs_declared["steps"])

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return manage_py("tests.e2e.pg_settings", "jobs", *args)

    shown = manage("show", dead, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["state"] == "dead"
    missing = manage("retry", UNKNOWN)
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.startswith("X_JOB_NOT_FOUND: ") and "CommandError" not in missing.stderr
    as_json = manage("cancel", dead, "--json")
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["error"]["code"] == "X_JOB_NOT_CANCELLABLE"
    bad = manage("list", "--state", "sleeping")
    assert bad.returncode == 2 and "invalid choice: 'sleeping'" in bad.stderr
    assert manage("frobnicate").returncode == 2
