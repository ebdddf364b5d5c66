"""``@job``: every declaration refusal, every X_JOB_DUPLICATE case, enqueue rules, describe(), discovery."""

from __future__ import annotations

import importlib
import math
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pydantic
import pytest
from django.apps import apps
from django.test import override_settings

from tests.conftest import JobsEnv
from ultimate_jobs import Actor, Concurrency, JobRun, job
from ultimate_jobs.core import registry
from ultimate_jobs.core.definition import JobHandle
from ultimate_jobs.core.ids import new_id
from ultimate_jobs.core.installed import set_job_driver
from ultimate_jobs.errors import JobDuplicateError, JobNameTakenError, UltimateError
from ultimate_jobs.testing import run_jobs


class OrderIn(pydantic.BaseModel):
    order_id: str
    org_id: str
    amount: int = 0


def by_order(i: OrderIn) -> str:
    return f"charge:{i.order_id}"


def by_org(i: OrderIn) -> str:
    return i.org_id


def body(run: JobRun[Any]) -> None:
    return None


def declare(**options: Any) -> JobHandle[Any, Any]:
    """Declare ``body`` under the options given (a name avoids clashing with other tests)."""
    options.setdefault("name", "declared")
    return job(**options)(body)


def code_of_refusal(fn: Callable[[], Any]) -> str:
    with pytest.raises(UltimateError) as caught:
        fn()
    return caught.value.code


def valid(**overrides: Any) -> dict[str, Any]:
    options: dict[str, Any] = {"input": OrderIn, "idempotency_key": by_order, "tenant": by_org}
    options.update(overrides)
    return options


def rows(env: JobsEnv) -> list[Any]:
    return list(env.driver.rows.values())


# -- declaration refusals ----------------------------------------------------------------------


def test_a_valid_declaration_registers_under_the_function_name(jobs: JobsEnv) -> None:
    @job(**valid())
    def charge_order(run: JobRun[OrderIn]) -> None:
        return None

    assert isinstance(charge_order, JobHandle)
    assert charge_order.name == "charge_order"
    assert registry.lookup("charge_order") is charge_order


def test_missing_idempotency_key_is_x_idempotency_required(jobs: JobsEnv) -> None:
    assert code_of_refusal(lambda: declare(tenant="none")) == "X_IDEMPOTENCY_REQUIRED"
    assert code_of_refusal(lambda: declare(tenant="none", idempotency_key=None)) == "X_IDEMPOTENCY_REQUIRED"
    assert registry.lookup("declared") is None


def test_missing_tenant_is_x_job_tenant_required(jobs: JobsEnv) -> None:
    assert code_of_refusal(lambda: declare(idempotency_key=by_order)) == "X_JOB_TENANT_REQUIRED"
    assert code_of_refusal(lambda: declare(idempotency_key=by_order, tenant=None)) == "X_JOB_TENANT_REQUIRED"
    assert registry.lookup("declared") is None


# Each row: the options that break one rule. Every one is X_JOB_DECLARATION_INVALID.
INVALID_DECLARATIONS: list[tuple[str, dict[str, Any]]] = [
    ("tenant 'all'", valid(tenant="all")),
    ("tenant a number", valid(tenant=5)),
    ("tenant ''", valid(tenant="")),
    ("idempotency_key a string", valid(idempotency_key="charge")),
    ("input a dict class", valid(input=dict)),
    ("input a model instance", valid(input=OrderIn(order_id="o", org_id="g"))),
    ("input a string", valid(input="OrderIn")),
    ("concurrency 0", valid(concurrency=0)),
    ("concurrency negative", valid(concurrency=-1)),
    ("concurrency 1.5", valid(concurrency=1.5)),
    ("concurrency NaN", valid(concurrency=math.nan)),
    ("concurrency inf", valid(concurrency=math.inf)),
    ("concurrency True", valid(concurrency=True)),
    ("concurrency '2'", valid(concurrency="2")),
    ("Concurrency(limit=0)", valid(concurrency=Concurrency(limit=0))),
    ("Concurrency(limit=-2)", valid(concurrency=Concurrency(limit=-2))),
    ("Concurrency(limit=1.5)", valid(concurrency=Concurrency(limit=1.5))),  # type: ignore[arg-type]
    ("Concurrency(limit=NaN)", valid(concurrency=Concurrency(limit=math.nan))),  # type: ignore[arg-type]
    ("Concurrency(limit=True)", valid(concurrency=Concurrency(limit=True))),
    ("Concurrency key not callable", valid(concurrency=Concurrency(key="order_id"))),  # type: ignore[arg-type]
    ("when_busy 'drop'", valid(concurrency=Concurrency(key=by_org, when_busy="drop"))),  # type: ignore[arg-type]
    ("step_timeout 0", valid(step_timeout=0)),
    ("step_timeout '0s'", valid(step_timeout="0s")),
    ("step_timeout negative", valid(step_timeout=-1000)),
    ("step_timeout negative timedelta", valid(step_timeout=timedelta(seconds=-1))),
    ("event_poll 0", valid(event_poll=0)),
    ("event_poll negative", valid(event_poll=-5)),
    ("timeout junk", valid(timeout="soon")),
    ("timeout 0", valid(timeout=0)),
    ("timeout bool", valid(timeout=True)),
    ("timeout a list", valid(timeout=[10])),
    ("retry attempts 0", valid(retry={"attempts": 0})),
    ("queue ''", valid(queue="")),
    ("priority 'high'", valid(priority="high")),
    ("on_settled not callable", valid(on_settled="notify")),
    ("name ''", valid(name="")),
    ("name a number", valid(name=7)),
]


@pytest.mark.parametrize(("why", "options"), INVALID_DECLARATIONS, ids=[w for w, _ in INVALID_DECLARATIONS])
def test_declaration_refusals_are_x_job_declaration_invalid(jobs: JobsEnv, why: str, options: dict[str, Any]) -> None:
    options.setdefault("name", "declared")
    name = options["name"] if isinstance(options["name"], str) and options["name"] else "body"
    assert code_of_refusal(lambda: job(**options)(body)) == "X_JOB_DECLARATION_INVALID"
    assert registry.lookup(name) is None


def test_an_unknown_option_is_refused_before_decorating(jobs: JobsEnv) -> None:
    with pytest.raises(UltimateError) as caught:
        job(idempotency_key=by_order, tenant="none", retries=3)  # type: ignore[call-arg]
    assert caught.value.code == "X_JOB_DECLARATION_INVALID"
    assert caught.value.meta["field"] == "retries"


@pytest.mark.parametrize("arity", [0, 2])
def test_a_body_with_the_wrong_arity_is_refused(jobs: JobsEnv, arity: int) -> None:
    def none() -> None:
        return None

    def two(run: JobRun[Any], extra: Any) -> None:
        return None

    fn = none if arity == 0 else two
    assert code_of_refusal(lambda: job(idempotency_key=by_order, tenant="none")(fn)) == "X_JOB_DECLARATION_INVALID"
    assert registry.lookup(fn.__name__) is None


def test_decorating_something_not_callable_is_refused(jobs: JobsEnv) -> None:
    assert code_of_refusal(lambda: job(idempotency_key=by_order, tenant="none")(5)) == "X_JOB_DECLARATION_INVALID"


def test_valid_concurrency_forms_are_kept(jobs: JobsEnv) -> None:
    plain = declare(**valid(concurrency=3, name="plain"))
    assert plain.concurrency == Concurrency(limit=3)
    whole_float = declare(**valid(concurrency=2.0, name="whole_float"))
    assert whole_float.concurrency is not None and whole_float.concurrency.limit == 2
    keyed = declare(**valid(concurrency=Concurrency(key=by_org, limit=2, when_busy="fail"), name="keyed"))
    assert keyed.concurrency == Concurrency(key=by_org, limit=2, when_busy="fail")


def test_ceilings_are_parsed_and_event_poll_defaults_to_30s(jobs: JobsEnv) -> None:
    handle = declare(**valid(timeout="10s", step_timeout=timedelta(seconds=2), name="ceilings"))
    assert (handle.timeout_ms, handle.step_timeout_ms, handle.event_poll_ms) == (10_000, 2_000, 30_000)
    polled = declare(**valid(event_poll="5s", name="polled"))
    assert polled.event_poll_ms == 5_000
    assert polled.timeout_ms is None and polled.step_timeout_ms is None


# -- X_JOB_DUPLICATE ---------------------------------------------------------------------------


def test_two_definitions_setting_the_same_name_are_refused(jobs: JobsEnv) -> None:
    @job(name="mail.send", idempotency_key=by_order, tenant="none")
    def send_v1(run: JobRun[Any]) -> None:
        return None

    with pytest.raises(JobNameTakenError) as caught:

        @job(name="mail.send", idempotency_key=by_order, tenant="none")
        def send_v2(run: JobRun[Any]) -> None:
            return None

    assert caught.value.code == "X_JOB_DUPLICATE"
    assert registry.lookup("mail.send") is send_v1  # the first is not seated out


def _sync_in_origin_a() -> JobHandle[Any, Any]:
    @job(idempotency_key=by_order, tenant="none")
    def sync(run: JobRun[Any]) -> str:
        return "a"

    return sync


def _sync_in_origin_b() -> JobHandle[Any, Any]:
    @job(idempotency_key=by_order, tenant="none")
    def sync(run: JobRun[Any]) -> str:
        return "b"

    return sync


def test_two_functions_with_one_derived_name_in_different_origins_are_refused(jobs: JobsEnv) -> None:
    first = _sync_in_origin_a()
    with pytest.raises(JobDuplicateError) as caught:
        _sync_in_origin_b()
    assert caught.value.code == "X_JOB_DUPLICATE"
    assert caught.value.meta == {"name": "sync", "seated": first.origin, "refused": first.origin.replace("_a.", "_b.")}
    assert registry.lookup("sync") is first


def test_an_explicit_name_colliding_with_a_derived_one_is_refused(jobs: JobsEnv) -> None:
    _sync_in_origin_a()
    with pytest.raises(UltimateError) as caught:

        @job(name="sync", idempotency_key=by_order, tenant="none")
        def other(run: JobRun[Any]) -> None:
            return None

    assert caught.value.code == "X_JOB_DUPLICATE"


def test_the_same_declaration_declared_again_is_one_registration(jobs: JobsEnv) -> None:
    first = _sync_in_origin_a()
    again = _sync_in_origin_a()  # same module + qualname: a re-import, not a second job
    assert again is not first
    assert registry.lookup("sync") is again
    assert [h.name for h in registry.registered()].count("sync") == 1


def test_registering_the_same_handle_twice_is_one_registration(jobs: JobsEnv) -> None:
    handle = _sync_in_origin_a()
    registry.register(handle)
    registry.register(handle)
    assert registry.lookup("sync") is handle
    assert [h.name for h in registry.registered()].count("sync") == 1


def test_an_alias_does_not_move_the_queue_key(jobs: JobsEnv) -> None:
    @job(idempotency_key=lambda i: "k", tenant="none")
    def notify(run: JobRun[Any]) -> None:
        return None

    alias = notify
    registry.register(alias)  # a second module scan reaching the alias
    assert alias.name == "notify"
    assert registry.lookup("alias") is None
    queued = alias.enqueue({})
    assert env_row(jobs, queued.id).name == "notify"


def env_row(env: JobsEnv, job_id: str) -> Any:
    record = env.driver.operator.get(job_id)
    assert record is not None
    return record


@pytest.fixture
def fixture_module(jobs: JobsEnv) -> Iterator[str]:
    """``tests.unit.fixtures_jobs`` imported fresh, and forgotten after."""
    name = "tests.unit.fixtures_jobs"
    sys.modules.pop(name, None)
    registry.unregister("fixture_ping")
    try:
        yield name
    finally:
        sys.modules.pop(name, None)
        registry.unregister("fixture_ping")


def test_a_reloaded_module_is_one_registration(fixture_module: str) -> None:
    module = importlib.import_module(fixture_module)
    first = registry.lookup("fixture_ping")
    assert first is module.fixture_ping
    reloaded = importlib.reload(module)
    assert registry.lookup("fixture_ping") is reloaded.fixture_ping
    assert reloaded.fixture_ping is not first
    assert [h.name for h in registry.registered()].count("fixture_ping") == 1


# -- enqueue -----------------------------------------------------------------------------------


def charge_handle(**overrides: Any) -> JobHandle[Any, Any]:
    options = valid(name="charge", **overrides)
    return job(**options)(body)


def test_enqueue_writes_one_row_with_the_declared_facts(jobs: JobsEnv) -> None:
    charge = charge_handle(queue="payments", priority=5, retry={"attempts": 4})
    run_id = "0190b0c0-0000-7000-8000-0000000000aa"
    queued = charge.enqueue({"order_id": "o-1", "org_id": "org-1", "amount": 3}, run_id=run_id)
    assert queued.deduped is False and queued.run_id == run_id
    row = env_row(jobs, queued.id)
    assert (row.name, row.queue, row.state, row.priority, row.max_attempts) == ("charge", "payments", "ready", 5, 4)
    assert row.idempotency_key == "charge:o-1"
    assert row.tenant_id == "org-1"
    assert row.input == {"order_id": "o-1", "org_id": "org-1", "amount": 3}
    assert row.run_at_ms == jobs.clock.now_ms()
    assert row.enqueued_by is None
    assert charge.enqueue(OrderIn(order_id="o-2", org_id="org-1"), queue="other").deduped is False
    assert {r.queue for r in rows(jobs)} == {"payments", "other"}


@pytest.mark.parametrize(
    "bad_input",
    [{"order_id": "o-1"}, {"order_id": 5, "org_id": "g"}, None, "o-1", [1, 2]],
)
def test_input_is_validated_at_enqueue_and_nothing_is_written(jobs: JobsEnv, bad_input: Any) -> None:
    charge = charge_handle()
    with pytest.raises(UltimateError) as caught:
        charge.enqueue(bad_input)
    assert caught.value.code == "X_VALIDATION"
    assert caught.value.meta["job"] == "charge"
    assert rows(jobs) == []


def test_a_job_without_a_model_takes_a_json_dict(jobs: JobsEnv) -> None:
    @job(idempotency_key=lambda i: f"k:{i['n']}", tenant="none")
    def untyped(run: JobRun[Any]) -> None:
        return None

    assert code_of_refusal(lambda: untyped.enqueue(["n"])) == "X_VALIDATION"
    assert code_of_refusal(lambda: untyped.enqueue({"n": 1, "when": datetime.now(UTC)})) == "X_VALIDATION"
    assert rows(jobs) == []
    assert env_row(jobs, untyped.enqueue({"n": 1}).id).input == {"n": 1}


def test_nan_is_not_json_and_is_refused_at_enqueue(jobs: JobsEnv) -> None:
    class Measured(pydantic.BaseModel):
        value: float

    @job(input=Measured, idempotency_key=lambda i: "m", tenant="none")
    def measured(run: JobRun[Measured]) -> None:
        return None

    @job(idempotency_key=lambda i: "u", tenant="none")
    def loose(run: JobRun[Any]) -> None:
        return None

    assert code_of_refusal(lambda: measured.enqueue({"value": math.nan})) == "X_VALIDATION"
    assert code_of_refusal(lambda: loose.enqueue({"value": math.inf})) == "X_VALIDATION"
    assert rows(jobs) == []


@pytest.mark.parametrize("key", ["", 5, None, "k" * 513])
def test_an_unusable_idempotency_key_is_refused_at_enqueue(jobs: JobsEnv, key: Any) -> None:
    handle = declare(**valid(idempotency_key=lambda i: key))
    assert code_of_refusal(lambda: handle.enqueue({"order_id": "o", "org_id": "g"})) == "X_JOB_DECLARATION_INVALID"
    assert rows(jobs) == []


@pytest.mark.parametrize("key", ["", 5, None, "k" * 201])
def test_an_unusable_concurrency_key_is_refused_at_enqueue(jobs: JobsEnv, key: Any) -> None:
    handle = declare(**valid(concurrency=Concurrency(key=lambda i: key, limit=1)))
    assert code_of_refusal(lambda: handle.enqueue({"order_id": "o", "org_id": "g"})) == "X_JOB_DECLARATION_INVALID"
    assert rows(jobs) == []


def test_a_concurrency_key_of_200_characters_is_accepted_and_stored(jobs: JobsEnv) -> None:
    handle = declare(**valid(concurrency=Concurrency(key=lambda i: "k" * 200, limit=1)))
    queued = handle.enqueue({"order_id": "o", "org_id": "g"})
    assert env_row(jobs, queued.id).concurrency_key == "k" * 200


def test_tenant_answering_no_org_is_refused_at_enqueue(jobs: JobsEnv) -> None:
    handle = declare(**valid(tenant=lambda i: ""))
    assert code_of_refusal(lambda: handle.enqueue({"order_id": "o", "org_id": "g"})) == "X_JOB_TENANT_MISMATCH"
    assert rows(jobs) == []


def test_a_live_key_dedupes_to_the_live_rows_ids(jobs: JobsEnv) -> None:
    charge = charge_handle()
    first = charge.enqueue({"order_id": "o-1", "org_id": "org-1"})
    again = charge.enqueue({"order_id": "o-1", "org_id": "org-1", "amount": 9}, run_id=new_id())
    assert again.deduped is True
    assert (again.id, again.run_id) == (first.id, first.run_id)
    assert len(rows(jobs)) == 1
    other_org = charge.enqueue({"order_id": "o-1", "org_id": "org-2"})
    assert other_org.deduped is False  # the live key includes the tenant
    run_jobs(clock=jobs.clock)
    after = charge.enqueue({"order_id": "o-1", "org_id": "org-1"})
    assert after.deduped is False and after.id != first.id  # a finished row holds no key


def test_on_conflict_error_is_x_job_duplicate(jobs: JobsEnv) -> None:
    charge = charge_handle()
    charge.enqueue({"order_id": "o-1", "org_id": "org-1"})
    with pytest.raises(UltimateError) as caught:
        charge.enqueue({"order_id": "o-1", "org_id": "org-1"}, on_conflict="error")
    assert caught.value.code == "X_JOB_DUPLICATE"
    assert len(rows(jobs)) == 1
    assert code_of_refusal(lambda: charge.enqueue({"order_id": "o-2", "org_id": "g"}, on_conflict="skip")) == (
        "X_INVARIANT"
    )


def test_delay_and_run_at(jobs: JobsEnv) -> None:
    charge = charge_handle()
    now = jobs.clock.now_ms()
    delayed = env_row(jobs, charge.enqueue({"order_id": "a", "org_id": "g"}, delay="10s").id)
    assert (delayed.state, delayed.run_at_ms) == ("delayed", now + 10_000)
    at = datetime.fromtimestamp((now + 60_000) / 1000, tz=UTC)
    scheduled = env_row(jobs, charge.enqueue({"order_id": "b", "org_id": "g"}, run_at=at).id)
    assert (scheduled.state, scheduled.run_at_ms) == ("delayed", now + 60_000)
    by_ms = env_row(jobs, charge.enqueue({"order_id": "c", "org_id": "g"}, run_at=now + 5).id)
    assert by_ms.run_at_ms == now + 5
    past = env_row(jobs, charge.enqueue({"order_id": "d", "org_id": "g"}, run_at=now - 5).id)
    assert past.state == "ready"
    with_td = env_row(jobs, charge.enqueue({"order_id": "e", "org_id": "g"}, delay=timedelta(minutes=1)).id)
    assert with_td.run_at_ms == now + 60_000


def test_delay_refusals(jobs: JobsEnv) -> None:
    charge = charge_handle()
    now = jobs.clock.now_ms()
    i = {"order_id": "a", "org_id": "g"}
    assert code_of_refusal(lambda: charge.enqueue(i, delay="10s", run_at=now)) == "X_JOB_REQUEST_INVALID"
    assert code_of_refusal(lambda: charge.enqueue(i, run_at=datetime(2026, 1, 1))) == "X_JOB_REQUEST_INVALID"
    assert code_of_refusal(lambda: charge.enqueue(i, delay="soon")) == "X_JOB_REQUEST_INVALID"
    assert rows(jobs) == []


def test_enqueue_as_stamps_the_actor(jobs: JobsEnv) -> None:
    charge = charge_handle()
    queued = charge.enqueue_as(Actor(id="user-7", org_id="org-1"), {"order_id": "o-1", "org_id": "org-1"})
    row = env_row(jobs, queued.id)
    assert (row.tenant_id, row.enqueued_by) == ("org-1", "user-7")

    @job(idempotency_key=lambda i: "report", tenant="none")
    def report(run: JobRun[Any]) -> None:
        return None

    row = env_row(jobs, report.enqueue_as(Actor(id="user-8", org_id="org-9"), {}, delay="1s").id)
    assert (row.tenant_id, row.enqueued_by, row.state) == ("org-9", "user-8", "delayed")


def test_enqueue_as_refuses_an_input_org_that_is_not_the_actors(jobs: JobsEnv) -> None:
    charge = charge_handle()
    with pytest.raises(UltimateError) as caught:
        charge.enqueue_as(Actor(id="user-7", org_id="org-1"), {"order_id": "o-1", "org_id": "org-2"})
    assert caught.value.code == "X_JOB_TENANT_MISMATCH"
    assert caught.value.meta == {"job": "charge", "actor_org": "org-1"}
    assert "org-2" not in caught.value.message  # never names the input's org
    assert rows(jobs) == []


def test_enqueue_as_never_runs_the_body_inline(jobs: JobsEnv) -> None:
    calls: list[str] = []

    @job(idempotency_key=lambda i: "x", tenant="none")
    def inline(run: JobRun[Any]) -> None:
        calls.append("ran")

    inline.enqueue_as(Actor(id="u"), {})
    assert calls == []
    assert [r.state for r in rows(jobs)] == ["ready"]


def test_describe(jobs: JobsEnv) -> None:
    def on_settled(settled: Any) -> None:
        return None

    handle = declare(
        **valid(
            name="describe_me",
            queue="payments",
            priority=2,
            retry={"attempts": 5, "backoff": "linear", "delay": "2s", "jitter": False},
            timeout="30s",
            step_timeout="5s",
            event_poll="1s",
            concurrency=Concurrency(key=by_org, limit=2, when_busy="fail"),
            on_settled=on_settled,
        )
    )
    d = handle.describe()
    assert d.kind == "job" and d.name == "describe_me" and d.queue == "payments" and d.priority == 2
    assert d.tenant == "input"
    assert d.retry == {
        "attempts": 5,
        "backoff": "linear",
        "delay_ms": 2000,
        "max_delay_ms": 3_600_000,
        "jitter": False,
        "dead_letter": True,
    }
    assert (d.timeout_ms, d.step_timeout_ms, d.event_poll_ms) == (30_000, 5_000, 1_000)
    assert d.concurrency == {"limit": 2, "keyed": True, "when_busy": "fail"}
    assert d.input_schema is not None and set(d.input_schema["properties"]) == {"order_id", "org_id", "amount"}
    assert d.on_settled is True
    assert d.origin == f"{__name__}.body"
    as_dict = d.as_dict()
    assert as_dict["name"] == "describe_me" and as_dict["concurrency"]["keyed"] is True
    assert sorted(as_dict) == sorted(
        [
            "kind",
            "name",
            "queue",
            "priority",
            "tenant",
            "retry",
            "timeout_ms",
            "step_timeout_ms",
            "event_poll_ms",
            "concurrency",
            "rate_limit",
            "input_schema",
            "on_settled",
            "origin",
        ]
    )

    @job(idempotency_key=lambda i: "k", tenant="none")
    def bare(run: JobRun[Any]) -> None:
        return None

    plain = bare.describe().as_dict()
    assert (plain["tenant"], plain["concurrency"], plain["input_schema"], plain["on_settled"]) == (
        "none",
        None,
        None,
        False,
    )
    assert plain["queue"] == "default" and plain["retry"]["attempts"] == 3 and plain["retry"]["jitter"] is True
    assert plain["rate_limit"] is None

    @job(idempotency_key=lambda i: "k", tenant="none", rate_limit="10/s", name="described_rate")
    def limited(run: JobRun[Any]) -> None:
        return None

    assert limited.describe().as_dict()["rate_limit"] == {
        "name": "job:described_rate",
        "rate": "10/s",
        "interval_ms": 100,
    }


# -- driver and discovery ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [{"DRIVER": "postgres", "DATABASE": "nowhere"}, {"DRIVER": "redis", "REDIS_URL": "redis://127.0.0.1:1/0"}],
    ids=["postgres-without-its-database", "redis-server-not-listening"],
)
def test_no_driver_is_x_driver_unavailable_at_the_call(jobs: JobsEnv, config: dict[str, str]) -> None:
    charge = charge_handle()
    set_job_driver(None)
    with override_settings(ULTIMATE_JOBS=config), pytest.raises(UltimateError) as caught:
        charge.enqueue({"order_id": "o-1", "org_id": "org-1"})
    assert caught.value.code == "X_DRIVER_UNAVAILABLE"
    assert rows(jobs) == []


def test_ready_imports_the_modules_setting(fixture_module: str) -> None:
    assert registry.lookup("fixture_ping") is None
    with override_settings(ULTIMATE_JOBS={"DRIVER": "memory", "MODULES": [fixture_module]}):
        apps.get_app_config("ultimate_jobs").ready()
    handle = registry.lookup("fixture_ping")
    assert isinstance(handle, JobHandle)
    assert handle.origin == f"{fixture_module}.fixture_ping"
