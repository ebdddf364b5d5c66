"""A run of org A cannot start or read work of org B: every enqueue path and every read of a job or a task
result, attempted from inside a real run of org A.

Each attack runs in the body of a job of org A, run by ``run_jobs`` on the memory and the Postgres driver,
as the test database's superuser and again as the application's role under forced row-level security. It
must be refused at the caller with ``X_TENANCY_ACTOR_MISMATCH`` naming no other org, and leave no row of
org B's behind; the same call for org A's own work, or inside ``cross_tenant()``, goes through.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connection, transaction

from tests.conftest import AnyJobsEnv, installed
from tests.djtasks import tasks
from tests.secapp.models import Bucket, Item
from tests.security.attacks import A, B, two_orgs
from tests.security.cross_org import DRIVERS, ROLES, database_role, declare_charge, jobs_on_driver
from ultimate_jobs import JobRun, backfill, cross_tenant, job, operator
from ultimate_jobs.contracts.operator import JobFilter, JobRecord
from ultimate_jobs.core.routing import jobs_router, set_jobs_router
from ultimate_jobs.core.scope import Actor, current_tenant
from ultimate_jobs.django_tasks import JobsBackend
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.drivers.postgres.outbox import postgres_outbox_store
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.outbox.routing import OutboxRouter
from ultimate_jobs.testing import FrozenClock, run_jobs

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("own_backfills")]

role = pytest.fixture(params=ROLES)(database_role)
env = pytest.fixture(params=DRIVERS)(jobs_on_driver)


_runs = itertools.count(1)


def in_a_run_of(org: str | None, env: AnyJobsEnv, attack: Callable[[JobRun[Any]], Any]) -> Any:
    """Run ``attack(run)`` in the body of a real run of ``org`` (``None``: a ``tenant="none"`` job); answers
    what it returned, or the coded error it raised."""
    answers: list[Any] = []

    @job(
        name=f"the-attacking-run-{next(_runs)}",
        idempotency_key=lambda i: "attack",
        tenant="none" if org is None else (lambda i: i["org_id"]),
        retry={"attempts": 1},
    )
    def body(run: JobRun[Any]) -> None:
        try:
            answers.append(attack(run))
        except UltimateError as error:
            answers.append(error)

    body.enqueue({"org_id": org} if org is not None else {})
    run_jobs(env.driver, clock=env.clock, advance=False)  # the run, and no delayed row after it
    assert len(answers) == 1, "the attacking run did not run once"
    return answers[0]


def refused(answer: Any, code: str = "X_TENANCY_ACTOR_MISMATCH") -> UltimateError:
    """``answer`` is the refusal, and it names no other org."""
    assert isinstance(answer, UltimateError), f"not refused: {answer!r}"
    assert answer.code == code, answer
    assert B not in answer.message and B not in repr(answer.meta), answer
    return answer


def rows_of(env: AnyJobsEnv, tenant: str | None = None, name: str | None = None) -> list[JobRecord]:
    """Every stored job row (of ``tenant``, of ``name``)."""
    assert env.driver.operator is not None
    return list(env.driver.operator.list(JobFilter(tenant_id=tenant, name=name)).rows)


def tenanted_backend() -> JobsBackend:
    """A ``django.tasks`` backend whose ``TENANT`` reads the org from the task's ``org`` keyword."""
    options = {"TENANT": "tests.djtasks.tasks.org_of"}
    return JobsBackend("tenanted", {"QUEUES": ["default", "tasks-low"], "OPTIONS": options})


# -- every enqueue path --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "enqueue",
        "enqueue_as",
        "a router's enqueue_many",
        "a step's enqueue",
        "a django.tasks task",
        "enqueue_many",
        "aenqueue",
        "aenqueue_many",
        "a django.tasks aenqueue",
    ],
)
def test_a_run_of_org_a_cannot_enqueue_work_for_org_b(env: AnyJobsEnv, path: str) -> None:
    charge = declare_charge()
    backend = tenanted_backend()
    attacks: dict[str, Callable[[JobRun[Any]], Any]] = {
        "enqueue": lambda run: charge.enqueue({"org_id": B}),
        "enqueue_as": lambda run: charge.enqueue_as(Actor(id="user-1", org_id=B), {"org_id": B}),
        # org A's own request first in the batch: refused with it, all or nothing
        "a router's enqueue_many": lambda run: jobs_router().enqueue_many(
            [charge.build_request({"org_id": A, "n": 1}), charge.build_request({"org_id": B})]
        ),
        "a step's enqueue": lambda run: run.step.run("fan-out", lambda: charge.enqueue({"org_id": B}).id),
        "a django.tasks task": lambda run: backend.enqueue(tasks.relaxed, ("x",), {"org": B}),
        "enqueue_many": lambda run: charge.enqueue_many([{"org_id": A, "n": 1}, {"org_id": B}]),
        # async code the run calls into (async_to_sync): the run's org follows, and so does the refusal
        "aenqueue": lambda run: async_to_sync(charge.aenqueue)({"org_id": B}),
        "aenqueue_many": lambda run: async_to_sync(charge.aenqueue_many)([{"org_id": A, "n": 1}, {"org_id": B}]),
        "a django.tasks aenqueue": lambda run: async_to_sync(backend.aenqueue)(tasks.relaxed, ("x",), {"org": B}),
    }
    refused(in_a_run_of(A, env, attacks[path]))
    assert rows_of(env, tenant=B) == [] and rows_of(env, name="charge") == []


def test_the_run_still_enqueues_for_its_own_org_for_no_org_and_across_orgs_when_it_says_so(env: AnyJobsEnv) -> None:
    charge = declare_charge()

    @job(name="orgless", idempotency_key=lambda i: "orgless", tenant="none")
    def orgless(run: JobRun[Any]) -> None:
        return None

    def enqueue_what_a_run_may(run: JobRun[Any]) -> list[bool]:
        own = charge.enqueue({"org_id": A, "n": 1})
        as_actor = charge.enqueue_as(Actor(id="user-1", org_id=A), {"org_id": A, "n": 2})
        none = orgless.enqueue({})
        across = cross_tenant("a support fix for org B", lambda: charge.enqueue({"org_id": B, "n": 3}))
        return [own.deduped, as_actor.deduped, none.deduped, across.deduped]

    assert in_a_run_of(A, env, enqueue_what_a_run_may) == [False] * 4
    assert sorted((r.tenant_id or "", r.name) for r in rows_of(env) if not r.name.startswith("the-attacking")) == [
        ("", "orgless"), (A, "charge"), (A, "charge"), (B, "charge"),
    ]  # fmt: skip


def test_a_run_with_no_org_enqueues_for_an_org_only_inside_cross_tenant(env: AnyJobsEnv) -> None:
    charge = declare_charge()
    refused(in_a_run_of(None, env, lambda run: charge.enqueue({"org_id": B})), code="X_TENANCY_ACTOR_ORG_REQUIRED")
    assert rows_of(env, name="charge") == []
    fanned = in_a_run_of(None, env, lambda run: cross_tenant("fan out", lambda: charge.enqueue({"org_id": B, "n": 1})))
    assert not fanned.deduped and [r.tenant_id for r in rows_of(env, name="charge")] == [B]


def test_an_outbox_enqueue_inside_atomic_for_org_b_is_refused_before_it_stages(role: str) -> None:
    clock = FrozenClock()
    driver = PostgresDriver(clock=clock)
    store = postgres_outbox_store(clock=clock)
    with installed(clock, driver) as env:
        charge = declare_charge()
        set_jobs_router(OutboxRouter(store=store, driver=driver))
        try:

            def stage_for_org_b(run: JobRun[Any]) -> Any:
                with transaction.atomic():
                    Bucket.objects.create(org_id=A, name="the business row")
                    try:
                        answer = charge.enqueue({"org_id": B})
                    except UltimateError as refusal:
                        answer = refusal
                    charge.enqueue({"org_id": A, "n": 1})  # the transaction was not aborted: this stages
                return answer

            refused(in_a_run_of(A, env, stage_for_org_b))
        finally:
            set_jobs_router(None)
        assert store.stats().pending == 1  # org A's row only
        assert [b.name for b in Bucket.objects.all()] == ["the business row"]


@pytest.mark.parametrize("kind", ["def", "async def"])
def test_a_backfill_handle_cannot_enqueue_work_for_another_org(env: AnyJobsEnv, kind: str) -> None:
    charge = declare_charge()
    bucket = Bucket.objects.create(org_id=A, name="a")
    Item.objects.create(org_id=A, bucket=bucket, secret="s", total=1)

    async def ahandle(rows: list[Item], signal: Any) -> None:
        for item in rows:
            await charge.aenqueue({"org_id": B, "n": item.pk})

    per_org = backfill(
        name="per-org",
        tenant=lambda i: i.org_id,
        rate=1_000,
        source=lambda ctx: Item.objects.filter(org_id=current_tenant()),
        handle=(lambda rows, signal: [charge.enqueue({"org_id": B, "n": item.pk}) for item in rows])
        if kind == "def"
        else ahandle,
    )
    enqueued = per_org.enqueue({"org_id": A})
    last = run_jobs(env.driver, clock=env.clock).last(enqueued.id)
    assert last is not None and (last.outcome, last.code) == ("dead-lettered", "X_TENANCY_ACTOR_MISMATCH")
    assert rows_of(env, name="charge") == []


# -- reads of a job or a task result -------------------------------------------------------------


def test_a_run_of_org_a_cannot_read_org_bs_task_result(env: AnyJobsEnv) -> None:
    backend = tenanted_backend()
    theirs = backend.enqueue(tasks.relaxed, ("b",), {"org": B})
    mine = backend.enqueue(tasks.relaxed, ("a",), {"org": A})
    refused(in_a_run_of(A, env, lambda run: backend.get_result(theirs.id)))
    assert in_a_run_of(A, env, lambda run: backend.get_result(mine.id).args) == ["a"]
    assert backend.get_result(theirs.id).args == ["b"]  # outside any run: the operator's read


@pytest.mark.parametrize(
    "read",
    [
        "inspect_job",
        "retry_job",
        "cancel_job",
        "remove_job",
        "promote_job",
        "list_jobs of org B",
        "list_jobs of org B sorted by name",
        "count_jobs of org B",
        "remove_many of org B",
        "inspect_queues",
        "inspect_stats",
        "inspect_dashboard",
        "inspect_backfills",
    ],
)
def test_the_operator_called_from_a_run_answers_for_the_runs_org_only(env: AnyJobsEnv, read: str) -> None:
    charge = declare_charge()
    theirs = charge.enqueue({"org_id": B}, delay="1h").id
    attacks: dict[str, Callable[[JobRun[Any]], Any]] = {
        "inspect_job": lambda run: operator.inspect_job(theirs),
        "retry_job": lambda run: operator.retry_job(theirs),
        "cancel_job": lambda run: operator.cancel_job(theirs, "from org A"),
        "remove_job": lambda run: operator.remove_job(theirs),
        "promote_job": lambda run: operator.promote_job(theirs),
        "list_jobs of org B": lambda run: operator.list_jobs(tenant_id=B),
        "list_jobs of org B sorted by name": lambda run: operator.list_jobs(tenant_id=B, order="name"),
        "count_jobs of org B": lambda run: operator.count_jobs(tenant_id=B),
        "remove_many of org B": lambda run: operator.remove_many(state="delayed", tenant_id=B),
        "inspect_queues": lambda run: operator.inspect_queues(),
        "inspect_stats": lambda run: operator.inspect_stats(),
        "inspect_dashboard": lambda run: operator.inspect_dashboard("7d"),
        "inspect_backfills": lambda run: operator.inspect_backfills(),
    }
    refused(in_a_run_of(A, env, attacks[read]))
    [row] = rows_of(env, tenant=B)
    assert (row.id, row.state) == (theirs, "delayed")  # untouched


def test_a_run_lists_its_own_orgs_jobs_and_reads_them(env: AnyJobsEnv) -> None:
    charge = declare_charge()
    charge.enqueue({"org_id": B}, delay="1h")
    mine = charge.enqueue({"org_id": A, "n": 1}, delay="1h").id

    def read_own(run: JobRun[Any]) -> Any:
        listed = [(r.tenant_id, r.name) for r in operator.list_jobs(name="charge").rows]
        by_attempts = [r.tenant_id for r in operator.list_jobs(name="charge", order="-attempts").rows]
        counted = operator.count_jobs(name="charge")
        return listed, operator.inspect_job(mine).job.id, by_attempts, (counted.rows, counted.basis)

    assert in_a_run_of(A, env, read_own) == ([(A, "charge")], mine, [A], (1, "count"))
    everything = in_a_run_of(A, env, lambda run: cross_tenant("support", lambda: len(operator.list_jobs().rows)))
    assert everything >= 3  # both charges and the attacking runs


# -- inside a transactional step (run.step.atomic: Postgres, the step's writes share one transaction) ----


def secrets_in_the_session() -> list[str]:
    """Every item secret this session's raw SQL reads (all of them where Postgres skips the policies)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM secapp_item ORDER BY secret")
        return [secret for (secret,) in cursor.fetchall()]


@pytest.mark.parametrize("env", ["postgres"], indirect=True)
def test_a_transactional_step_of_org_a_cannot_enqueue_for_org_b_and_its_writes_roll_back(env: AnyJobsEnv) -> None:
    charge = declare_charge()

    def pay_and_fan_out() -> None:
        Bucket.objects.create(org_id=A, name="marked paid")
        charge.enqueue({"org_id": A, "n": 1})  # org A's own: staged in the step's transaction
        charge.enqueue({"org_id": B})

    refused(in_a_run_of(A, env, lambda run: run.step.atomic("pay", pay_and_fan_out)))
    assert rows_of(env, name="charge") == []  # org A's enqueue rolled back with the refused step
    assert list(Bucket.objects.values_list("name", flat=True)) == []

    def pay_for_own_org() -> str:
        Bucket.objects.create(org_id=A, name="marked paid")
        return charge.enqueue({"org_id": A, "n": 2}).id

    own = in_a_run_of(A, env, lambda run: run.step.atomic("pay", pay_for_own_org))
    assert [(r.id, r.tenant_id) for r in rows_of(env, name="charge")] == [(own, A)]
    assert list(Bucket.objects.values_list("name", flat=True)) == ["marked paid"]


@pytest.mark.parametrize("env", ["postgres"], indirect=True)
def test_a_transactional_step_acts_under_its_runs_org(env: AnyJobsEnv, role: str) -> None:
    rows = two_orgs()

    def peek() -> list[Any]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('ultimate_jobs.org_id', true)")
            (org,) = cursor.fetchone() or ("",)
        return [org, secrets_in_the_session()]

    org, raw = in_a_run_of(A, env, lambda run: run.step.atomic("peek", peek))
    assert org == A  # the step's transaction carries the run's scope
    if role == "app role":  # where the policies apply, raw SQL in it reads org A's rows only
        assert raw == ["secret of org-A"]

    theirs = rows[B]["item"]
    forged = Item(pk=theirs.pk, org_id=A, bucket=rows[A]["bucket"], secret="overwritten", total=0)
    refused(in_a_run_of(A, env, lambda run: run.step.atomic("overwrite", forged.save)))
    theirs.refresh_from_db()
    assert (theirs.org_id, theirs.secret) == (B, "secret of org-B")
    assert len(secrets_in_the_session()) == 2  # the slot's connection is unscoped again after the runs
