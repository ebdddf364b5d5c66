"""Row-level security on Postgres: what the Python guard cannot see, the database refuses.

Run as the application's role (no SUPERUSER, no BYPASSRLS, owner of the scoped tables, so only FORCE
ROW LEVEL SECURITY makes the policy apply to it). Each attack reaches for org B's rows from a run of
org A through a path no queryset of a scoped model sees — a subquery, ``Exists``, a join or an
aggregate from another model, ``union()``, ``extra()``, raw SQL — and must come back with nothing of
org B's, an answer that does not change when org B's rows do, and org B's rows unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pydantic
import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction
from django.db.backends.signals import connection_created
from django.db.models import Count, Exists, Subquery, Value
from django.db.models.functions import Coalesce

from tests.admin_scenario import postgres_env
from tests.conftest import JobsEnv
from tests.secapp.models import Bucket, Item, Note
from tests.security.attacks import A, B, denied, stored, two_orgs
from ultimate_jobs import JobRun, job, job_worker
from ultimate_jobs.core.scope import Actor, acting_as, cross_tenant
from ultimate_jobs.drivers.postgres.wake import conninfo_for
from ultimate_jobs.guards.row_security import EnableTenantRowSecurity, check_row_security
from ultimate_jobs.runtime.dbconn import release_stale_connections
from ultimate_jobs.testing import run_jobs

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def rows(as_app_role: str) -> dict[str, Any]:
    return two_orgs()


def secrets_seen() -> list[str]:
    """Every item secret this session's SQL can read."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM secapp_item ORDER BY secret")
        return [secret for (secret,) in cursor.fetchall()]


# -- paths only the database sees ------------------------------------------------------------------


@pytest.mark.parametrize(
    "why",
    [
        "annotate(Subquery)",
        "filter(Exists) as an oracle",
        "values() across a relation from an unscoped model",
        "a filter across a relation from an unscoped model as an oracle",
        "Count over a relation",
        "union() with an unscoped queryset",
        "extra()",
        "raw SQL",
    ],
)
def test_reads_only_the_database_sees_are_confined_to_the_run_org(rows: dict[str, Any], why: str) -> None:
    bucket_a = rows[A]["bucket"]
    # org B's item filed under org A's bucket: a relation count from A's side would count it
    Item.objects.create(org_id=B, bucket=bucket_a, secret="planted by org-B", total=1)

    def raw_sql() -> list[str]:
        return secrets_seen()

    attacks: dict[str, Callable[[], Any]] = {
        "annotate(Subquery)": lambda: list(
            Item.objects.filter(org_id=A)
            .annotate(stolen=Subquery(Item.objects.filter(org_id=B).values("secret")[:1]))
            .values_list("stolen", flat=True)
        ),
        "filter(Exists) as an oracle": lambda: list(
            Bucket.objects.filter(org_id=A)
            .filter(Exists(Item.objects.filter(org_id=B, total=10)))
            .values_list("pk", flat=True)
        ),
        "values() across a relation from an unscoped model": lambda: list(
            Note.objects.order_by("pk").values_list("item__secret", flat=True)
        ),
        "a filter across a relation from an unscoped model as an oracle": lambda: Note.objects.filter(
            item__org_id=B, item__total=10
        ).count(),
        "Count over a relation": lambda: list(
            Bucket.objects.filter(org_id=A).annotate(n=Count("items")).values_list("n", flat=True)
        ),
        "union() with an unscoped queryset": lambda: sorted(
            Note.objects.filter(text="")
            .values_list("text", flat=True)
            .union(Item.objects.values_list("secret", flat=True))
        ),
        "extra()": lambda: list(Note.objects.extra(select={"s": "SELECT max(secret) FROM secapp_item"}).values("s")),
        "raw SQL": raw_sql,
    }
    denied(attacks[why], "row-level security", rows)


def test_a_write_through_a_subquery_cannot_copy_another_orgs_data(rows: dict[str, Any]) -> None:
    mine = rows[A]["item"]
    with acting_as(Actor(org_id=A)):
        stolen = Subquery(Item._base_manager.filter(org_id=B).values("secret")[:1])
        Item.objects.filter(pk=mine.pk).update(secret=Coalesce(stolen, Value("nothing")))
    assert stored(mine) == (A, "nothing", 10)
    assert stored(rows[B]["item"]) == (B, "secret of org-B", 10)


def test_raw_sql_writes_reach_only_the_run_org(rows: dict[str, Any]) -> None:
    with acting_as(Actor(org_id=A)), connection.cursor() as cursor:
        cursor.execute("UPDATE secapp_item SET total = 0")
        assert cursor.rowcount == 1
        cursor.execute("DELETE FROM secapp_note WHERE item_id = %s", [rows[A]["item"].pk])
        cursor.execute("DELETE FROM secapp_item")
        assert cursor.rowcount == 1
    assert stored(rows[B]["item"]) == (B, "secret of org-B", 10)


def test_raw_sql_cannot_write_a_row_into_another_org(rows: dict[str, Any]) -> None:
    bucket_b = rows[B]["bucket"]
    with acting_as(Actor(org_id=A)):
        refused_by_policy = pytest.raises(DatabaseError, match="row-level security")
        with refused_by_policy, transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO secapp_item (org_id, bucket_id, secret, total) VALUES (%s, %s, 'forged', 0)",
                [B, bucket_b.pk],
            )
        refused_by_policy = pytest.raises(DatabaseError, match="row-level security")
        with refused_by_policy, transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("UPDATE secapp_item SET org_id = %s", [B])
    assert Item.objects.filter(secret="forged").count() == 0
    assert sorted(Item.objects.values_list("org_id", flat=True)) == [A, B]


# -- the scope the database sees follows the one the code is in -----------------------------------


def test_outside_a_run_and_across_tenants_every_row_is_visible(rows: dict[str, Any]) -> None:
    everything = ["secret of org-A", "secret of org-B"]
    assert secrets_seen() == everything
    with acting_as(Actor(org_id=A)):
        assert secrets_seen() == ["secret of org-A"]
        assert cross_tenant("a support fix across orgs", secrets_seen) == everything
        assert secrets_seen() == ["secret of org-A"]
    assert secrets_seen() == everything


def test_a_run_with_no_org_sees_no_scoped_row_until_it_says_cross_tenant(rows: dict[str, Any]) -> None:
    with acting_as(Actor(org_id=None)):
        assert secrets_seen() == []
        assert len(cross_tenant("nightly totals", secrets_seen)) == 2


def test_nested_scopes_restore_the_outer_one(rows: dict[str, Any]) -> None:
    with acting_as(Actor(org_id=A)):
        with acting_as(Actor(org_id=B)):
            assert secrets_seen() == ["secret of org-B"]
        assert secrets_seen() == ["secret of org-A"]


def test_a_rollback_inside_a_run_does_not_widen_it(rows: dict[str, Any]) -> None:
    with acting_as(Actor(org_id=A)):
        with pytest.raises(DatabaseError), transaction.atomic():
            assert secrets_seen() == ["secret of org-A"]
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1/0")
        assert secrets_seen() == ["secret of org-A"]
        # cross_tenant ended inside a transaction that had already failed: the rollback restores the run's scope
        with pytest.raises(DatabaseError), transaction.atomic():

            def fail_across_tenants() -> None:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT 1/0")

            cross_tenant("a support fix", fail_across_tenants)
        assert secrets_seen() == ["secret of org-A"]
    assert len(secrets_seen()) == 2


def test_a_connection_opened_inside_a_run_takes_its_scope(rows: dict[str, Any], app_role: str) -> None:
    with acting_as(Actor(org_id=A)):
        connection.close()
        with connection.cursor() as cursor:  # a new session: the test's SET ROLE is gone with the old one
            cursor.execute(f"SET ROLE {connection.ops.quote_name(app_role)}")
        assert secrets_seen() == ["secret of org-A"]


def test_leaving_a_run_on_a_connection_the_server_dropped_raises_nothing(rows: dict[str, Any]) -> None:
    """The session is gone, and its setting with it: leaving the scope sends nothing, so it raises nothing
    over the run's own outcome; once the unusable connection is dropped (as a worker's thread does between
    jobs) the next session is set before its first statement."""
    with acting_as(Actor(org_id=A)):
        assert secrets_seen() == ["secret of org-A"]
        pid = connection.connection.info.backend_pid
        with psycopg.connect(conninfo_for(connection.settings_dict), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        with pytest.raises(DatabaseError):
            secrets_seen()  # the body learns of it; Django now holds a closed connection
    release_stale_connections()
    assert connection.connection is None
    assert len(secrets_seen()) == 2  # a new session (the superuser's: the test's SET ROLE went with the old one)


class OrgIn(pydantic.BaseModel):
    org_id: str


def test_a_job_body_reads_only_its_org_through_raw_sql(rows: dict[str, Any], jobs: JobsEnv) -> None:
    seen: dict[str, list[str]] = {}

    @job(input=OrgIn, idempotency_key=lambda i: f"peek:{i.org_id}", tenant=lambda i: i.org_id)
    def peek(run: JobRun[OrgIn]) -> None:
        seen[run.input.org_id] = secrets_seen()

    peek.enqueue({"org_id": A})
    peek.enqueue({"org_id": B})
    run_jobs(clock=jobs.clock)
    assert seen == {A: ["secret of org-A"], B: ["secret of org-B"]}
    assert len(secrets_seen()) == 2  # the worker's connection is unscoped again after the runs


def test_a_worker_slot_thread_confines_each_run_to_its_org(
    rows: dict[str, Any], app_role: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real worker on the Postgres driver: each slot thread opens its own connection (as the application
    role here, like a deployment's), and a run there reads only its org through raw SQL."""
    quoted = connection.ops.quote_name(app_role)

    def as_the_app(sender: Any, connection: Any, **_: Any) -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"SET ROLE {quoted}")

    seen: list[tuple[str, list[str]]] = []
    connection_created.connect(as_the_app, dispatch_uid="test-as-the-app-role")
    try:
        with postgres_env(monkeypatch) as env:

            @job(input=PeekIn, idempotency_key=lambda i: f"peek:{i.n}", tenant=lambda i: i.org_id)
            def peek(run: JobRun[PeekIn]) -> None:
                seen.append((run.input.org_id, secrets_seen()))

            for n, org in enumerate([A, B, A, B]):
                peek.enqueue({"org_id": org, "n": n})
            # one slot: the thread's one connection serves every run in turn
            worker = job_worker(driver=env.driver, context=dict, clock=env.clock, concurrency=1, claim_ahead=0)
            worker.start(loop=False)
            try:
                while len(seen) < 4:
                    worker.run_once()
                    assert worker.wait_idle(10.0)
            finally:
                worker.drain(deadline_ms=10_000)
    finally:
        connection_created.disconnect(dispatch_uid="test-as-the-app-role")
    assert sorted(seen) == [(A, ["secret of org-A"])] * 2 + [(B, ["secret of org-B"])] * 2


class PeekIn(pydantic.BaseModel):
    org_id: str
    n: int


# -- the system check and the migration operation --------------------------------------------------


def test_the_check_warns_when_the_role_bypasses_row_level_security() -> None:
    """The test database's own role is a superuser: Postgres ignores every policy for it."""
    ids = [message.id for message in check_row_security(databases=["default"])]
    assert ids == ["ultimate_jobs.X_TENANCY_ROW_SECURITY_BYPASSED"]


def test_the_check_is_quiet_for_the_application_role(as_app_role: str) -> None:
    assert check_row_security(databases=["default"]) == []


def test_the_check_names_a_scoped_table_without_forced_row_level_security(as_app_role: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE secapp_bucket NO FORCE ROW LEVEL SECURITY")
    try:
        messages = check_row_security(databases=["default"])
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE secapp_bucket FORCE ROW LEVEL SECURITY")
    assert [m.id for m in messages] == ["ultimate_jobs.X_TENANCY_ROW_SECURITY_OFF"]
    assert "secapp.Bucket" in messages[0].msg and "EnableTenantRowSecurity('Bucket')" in str(messages[0].hint)


def test_the_operation_is_plain_sql_and_reversible(capsys: pytest.CaptureFixture[str]) -> None:
    call_command("sqlmigrate", "secapp", "0002")
    sql = capsys.readouterr().out
    assert 'ALTER TABLE "secapp_item" FORCE ROW LEVEL SECURITY' in sql
    assert 'CREATE POLICY ultimate_jobs_tenant ON "secapp_item"' in sql
    call_command("migrate", "secapp", "0001", verbosity=0)
    try:
        assert _row_security("secapp_item") == (False, False, 0)
    finally:
        call_command("migrate", "secapp", verbosity=0)
    assert _row_security("secapp_item") == (True, True, 1)
    assert EnableTenantRowSecurity("Item", field="org").deconstruct()[2] == {"field": "org"}


def _row_security(table: str) -> tuple[bool, bool, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relrowsecurity, relforcerowsecurity, (SELECT count(*) FROM pg_policy WHERE polrelid = c.oid)"
            " FROM pg_class c WHERE oid = to_regclass(%s)",
            [table],
        )
        row = cursor.fetchone()
    assert row is not None
    return bool(row[0]), bool(row[1]), int(row[2])
