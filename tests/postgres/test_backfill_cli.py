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
from tests.secapp.models import Bucket, Item, Post
from ultimate_jobs import operator
from ultimate_jobs.core.scope import current_tenant
from ultimate_jobs.core.signals import CancelSignal
from ultimate_jobs.features.backfills import backfill
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
    assert before.json["error"]["code"] == "X_BACKFILL_PENDING"
    assert before.json["error"]["meta"] == {"pending": ["slugs"]}
    assert [(r["name"], r["state"], r["run"]) for r in before.json["rows"]] == [("slugs", "pending", None)]
    human = cli("--pending")
    assert human.code == 1 and "slugs" in human.out and "pending" in human.out
    assert "X_BACKFILL_PENDING: unswept: slugs" in human.err and "jobs_backfill --all --write" in human.err

    wrote = cli("slugs", "--write", "--json")
    assert wrote.code == 0, wrote
    assert wrote.json["action"] == "enqueued" and wrote.json["job_id"]
    assert Post.objects.filter(slug="").count() == 3  # --write never runs the pass inline
    assert cli("--pending", "--json").json["rows"][0]["state"] == "pending"  # queued, no ledger row yet
    run_jobs(any_jobs.driver, clock=any_jobs.clock)
    assert Post.objects.filter(slug="").count() == 0

    after = cli("--pending", "--json")
    assert after.code == 0, after
    assert after.json["pending"] == [] and "error" not in after.json
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


def test_force_while_a_pass_is_live_is_refused_and_adds_nothing(any_jobs: AnyJobsEnv) -> None:
    """--force joins a live pass (its key is the name), so it cannot sweep again: X_BACKFILL_RUNNING,
    and the queue holds the one live pass it held before."""
    Post.objects.bulk_create(Post(title=f"p{i}") for i in range(2))
    declare("slugs")
    first = cli("slugs", "--write", "--json")
    assert first.code == 0 and first.json["action"] == "enqueued"
    joined = cli("slugs", "--write", "--json")
    assert joined.code == 0 and joined.json["action"] == "joined" and joined.json["job_id"] == first.json["job_id"]
    forced = cli("slugs", "--write", "--force", "--json")
    assert forced.code == 1 and forced.json["error"]["code"] == "X_BACKFILL_RUNNING"
    assert forced.json["error"]["meta"]["job_id"] == first.json["job_id"]
    assert f"jobs cancel {first.json['job_id']}" in forced.json["error"]["message"]
    assert [j.id for j in operator.list_jobs(name="slugs").rows] == [first.json["job_id"]]
    run_jobs(any_jobs.driver, clock=any_jobs.clock)
    assert cli("slugs", "--write", "--force", "--json").json["action"] == "enqueued"  # once it ended, force sweeps


def test_input_enqueues_a_tenant_scoped_pass_for_one_org(any_jobs: AnyJobsEnv) -> None:
    for org in ("org-1", "org-2"):
        bucket = Bucket.objects.create(org_id=org, name=f"b-{org}")
        Item.objects.create(org_id=org, bucket=bucket, secret="s", total=1)
    touched: list[str] = []
    backfill(name="one-org", tenant=lambda i: i.org_id, rate=FAST,
             source=lambda ctx: Item.objects.filter(org_id=current_tenant()),
             handle=lambda rows, signal: touched.extend(i.org_id for i in rows))  # fmt: skip
    wrote = cli("one-org", "--write", "--input", '{"org_id": "org-2"}', "--json")
    assert wrote.code == 0, wrote
    assert operator.inspect_job(wrote.json["job_id"]).job.tenant_id == "org-2"
    run_jobs(any_jobs.driver, clock=any_jobs.clock)
    assert touched == ["org-2"]


@pytest.mark.parametrize(
    ("text", "says"),
    [("{nope", "is not JSON"), ('["org-1"]', "must be a JSON object"), ('{"force": true}', "pass --force instead")],
)
def test_bad_input_is_refused_with_its_code_and_enqueues_nothing(any_jobs: AnyJobsEnv, text: str, says: str) -> None:
    declare("slugs")
    refused = cli("slugs", "--write", "--input", text, "--json")
    assert refused.code == 1 and refused.json["error"]["code"] == "X_JOB_ARGUMENT_INVALID"
    assert says in refused.json["error"]["message"]
    assert operator.list_jobs(name="slugs").rows == ()


def test_input_without_a_name_is_a_usage_error(any_jobs: AnyJobsEnv) -> None:
    refused = cli("--all", "--input", "{}")
    assert refused.code == 2 and "--input goes with a NAME" in refused.err
