"""``manage.py jobs_backfill`` through the real ``call_command`` on the memory and the Postgres driver:
``--pending`` and its exit code, the dry run, ``--write`` and its gates, ``--all`` isolated per name,
``--list``, and the usage errors (exit 2)."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from tests.conftest import AnyJobsEnv
from tests.helpers import Result, command, manage_py
from tests.secapp.models import Post
from ultimate_jobs import operator
from ultimate_jobs.backfills import backfill
from ultimate_jobs.signals import CancelSignal
from ultimate_jobs.testing import run_jobs

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("own_backfills")]

FAST = 1_000


def cli(*args: str) -> Result:
    return command("jobs_backfill", *args)


def touch(rows: list[Post], signal: CancelSignal) -> None:
    Post.objects.filter(pk__in=[p.pk for p in rows]).update(slug="swept")


def declare(name: str, **extra: Any) -> Any:
    return backfill(
        name=name,
        tenant="none",
        rate=FAST,
        source=lambda ctx: Post.objects.filter(slug=""),
        count=lambda ctx: Post.objects.filter(slug="").count(),
        handle=touch,
        **extra,
    )


def test_pending_exits_non_zero_until_the_declared_backfill_completes(any_jobs: AnyJobsEnv) -> None:
    Post.objects.bulk_create(Post(title=f"p{i}") for i in range(3))
    declare("slugs")
    before = cli("--pending", "--json")
    assert before.code == 1
    assert before.json["pending"] == ["slugs"]
    assert [(r["name"], r["state"], r["run"]) for r in before.json["rows"]] == [("slugs", "pending", None)]
    human = cli("--pending")
    assert human.code == 1 and "slugs" in human.out and "pending" in human.out
    assert "unswept: slugs" in human.err

    wrote = cli("slugs", "--write", "--json")
    assert wrote.code == 0, wrote
    assert wrote.json["action"] == "enqueued" and wrote.json["job_id"]
    assert Post.objects.filter(slug="").count() == 3  # --write never runs the pass inline
    assert cli("--pending", "--json").json["rows"][0]["state"] == "pending"  # queued, no ledger row yet
    run_jobs(any_jobs.driver, clock=any_jobs.clock)
    assert Post.objects.filter(slug="").count() == 0

    after = cli("--pending", "--json")
    assert after.code == 0, after
    assert after.json["pending"] == []
    (row,) = after.json["rows"]
    assert (row["state"], row["run"]["status"], row["run"]["rows_processed"]) == ("completed", "completed", 3)


def test_the_dry_run_prints_the_count_and_writes_nothing(any_jobs: AnyJobsEnv) -> None:
    Post.objects.bulk_create(Post(title=f"p{i}") for i in range(7))
    declare("slugs")
    dry = cli("slugs", "--json")
    assert dry.code == 0, dry
    assert dry.json == {
        "name": "slugs", "state": "pending", "action": "dry-run", "count": 7, "job_id": None, "run_id": None,
        "error": None,
    }  # fmt: skip
    human = cli("slugs")
    assert human.code == 0
    assert "dry-run" in human.out and "7" in human.out
    assert "counting the rows slugs would sweep" in human.err  # the progress line, on stderr
    assert not operator.list_jobs().rows  # nothing enqueued
    assert operator.inspect_backfills() == []
    assert Post.objects.filter(slug="").count() == 7


def test_write_refuses_while_the_required_migration_is_unapplied(any_jobs: AnyJobsEnv) -> None:
    declare("needs-later", requires="secapp.9999_not_applied")
    declare("needs-post", requires="secapp.0003_post")
    refused = cli("needs-later", "--write", "--json")
    assert refused.code == 1
    error = json.loads(refused.out)["error"]
    assert error["code"] == "X_BACKFILL_MIGRATION_PENDING"
    assert error["meta"] == {"backfill": "needs-later", "requires": "secapp.9999_not_applied"}
    assert "manage.py migrate" in error["fix"]
    human = cli("needs-later", "--write")
    assert human.code == 1 and human.err.startswith("X_BACKFILL_MIGRATION_PENDING: ")
    assert not operator.list_jobs().rows
    assert cli("needs-post", "--write", "--json").json["action"] == "enqueued"  # an applied one passes


def test_an_excluded_environment_is_reported_excluded(any_jobs: AnyJobsEnv, settings: Any) -> None:
    settings.ULTIMATE_JOBS = {**settings.ULTIMATE_JOBS, "ENVIRONMENT": "dev"}
    declare("prod-only", environments=["production"])
    pending = cli("--pending", "--json")
    assert pending.code == 0  # excluded is not unswept
    assert [(r["name"], r["state"]) for r in pending.json["rows"]] == [("prod-only", "excluded")]
    refused = cli("prod-only", "--write", "--json")
    assert refused.code == 1
    error = refused.json["error"]
    assert error["code"] == "X_BACKFILL_ENVIRONMENT"
    assert error["meta"] == {"backfill": "prod-only", "environment": "dev", "state": "excluded"}
    every = cli("--all", "--write", "--json")
    assert every.code == 0
    assert [(p["name"], p["state"], p["action"]) for p in every.json["backfills"]] == [
        ("prod-only", "excluded", "left")
    ]


def test_all_continues_past_a_failing_name_and_force_writes_a_new_row(any_jobs: AnyJobsEnv) -> None:
    Post.objects.bulk_create(Post(title=f"p{i}") for i in range(2))
    declare("a-blocked", requires="secapp.9999_not_applied")
    declare("b-sweep")
    declare("c-sweep")
    every = cli("--all", "--write", "--json")
    assert every.code == 1  # one was refused
    by_name = {p["name"]: p for p in every.json["backfills"]}
    assert by_name["a-blocked"]["action"] == "refused"
    assert by_name["a-blocked"]["error"]["code"] == "X_BACKFILL_MIGRATION_PENDING"
    assert by_name["b-sweep"]["action"] == by_name["c-sweep"]["action"] == "enqueued"
    run_jobs(any_jobs.driver, clock=any_jobs.clock)
    assert cli("--pending", "--json").json["pending"] == ["a-blocked"]

    again = cli("b-sweep", "--write", "--json")
    assert again.code == 1 and again.json["error"]["code"] == "X_BACKFILL_APPLIED"
    forced = cli("b-sweep", "--write", "--force", "--json")
    assert forced.code == 0 and forced.json["action"] == "enqueued"
    run_jobs(any_jobs.driver, clock=any_jobs.clock)
    listed = cli("--list", "--name", "b-sweep", "--json")
    assert listed.code == 0
    assert [(r["name"], r["status"], r["declared"]) for r in listed.json["backfills"]] == [
        ("b-sweep", "completed", True),
        ("b-sweep", "completed", True),
    ]
    assert listed.json["backfills"][0]["run_id"] == forced.json["run_id"]
    human = cli("--list", "--status", "completed")
    assert human.code == 0 and human.out.count("b-sweep") == 2 and "c-sweep" in human.out


def test_an_unknown_name_is_refused(any_jobs: AnyJobsEnv) -> None:
    refused = cli("nope", "--json")
    assert refused.code == 1 and refused.json["error"]["code"] == "X_BACKFILL_UNKNOWN"


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("slugs", "--all"),
        ("--pending", "--list"),
        ("--pending", "--write"),
        ("--list", "--force"),
        ("--all", "--force"),
        ("slugs", "--status", "completed"),
        ("--list", "--status", "bogus"),
        ("--list", "--limit", "many"),
        ("--bogus",),
    ],
)
def test_bad_flags_are_usage_errors(any_jobs: AnyJobsEnv, args: tuple[str, ...]) -> None:
    declare("slugs")
    result = cli(*args)
    assert result.code == 2, result
    assert result.out == ""


@pytest.mark.slow
def test_the_process_exit_codes(transactional_db: None) -> None:
    """``manage.py jobs_backfill`` for real, over the e2e backfill's settings (which declare
    ``e2e-sweep-posts``, and the demo shop's backfill beside it)."""

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return manage_py("tests.e2e.backfill_settings", "jobs_backfill", *args)

    pending = manage("--pending", "--json")
    assert pending.returncode == 1, pending.stderr
    assert "e2e-sweep-posts" in json.loads(pending.stdout)["pending"]
    wrote = manage("e2e-sweep-posts", "--write", "--json")
    assert wrote.returncode == 0, wrote.stderr
    assert json.loads(wrote.stdout)["action"] == "enqueued"
    assert manage("--pending").returncode == 1  # enqueued is not swept: no worker ran it
    unknown = manage("nope")
    assert unknown.returncode == 1 and unknown.stderr.startswith("X_BACKFILL_UNKNOWN: ")
    assert "CommandError" not in unknown.stderr
    both = manage("--all", "--force")
    assert both.returncode == 2 and "usage:" in both.stderr and "--force sweeps one named backfill" in both.stderr
    assert manage().returncode == 2
