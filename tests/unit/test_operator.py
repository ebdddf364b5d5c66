"""The operator surface on the memory driver: every function's record, every refusal's code, and the
redaction of secret input fields on every surface that shows a job."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pydantic
from pydantic import SecretBytes, SecretStr
from typing_extensions import TypedDict

from tests.conftest import JobsEnv
from ultimate_jobs import JobRun, job, operator, task
from ultimate_jobs.contracts.jobs import NackOptions
from ultimate_jobs.contracts.operator import MAX_BULK_ROWS, QueueStats, WorkerInfo
from ultimate_jobs.contracts.schedules import Fire
from ultimate_jobs.core import registry
from ultimate_jobs.guards.redaction import MASK, redact, scrub, secret_values
from ultimate_jobs.guards.sealing import clear_model, is_envelope, seal_model, unseal
from ultimate_jobs.operator import BulkOutcome
from ultimate_jobs.testing import run_jobs
from ultimate_jobs.testing.conformance import raises_code, request

UNKNOWN = "00000000-0000-4000-8000-000000000000"
"""A well-formed job id no queue holds."""

TOKEN = "tok-9f8e7d6c5b4a"
KEY = "key-0123456789ab"


class Auth(pydantic.BaseModel):
    user: str
    key: SecretStr


class Deliver(pydantic.BaseModel):
    url: str
    token: SecretStr
    auth: Auth
    backups: list[SecretBytes] = []
    org_id: str = "org-1"


def deliver_input(**overrides: Any) -> dict[str, Any]:
    value = {"url": "https://example.test/hook", "token": TOKEN, "auth": {"user": "ops", "key": KEY}}
    return {**value, **overrides}


def leaks(data: Any) -> bool:
    """Whether a secret's clear text appears anywhere in ``data``'s JSON."""
    text = json.dumps(data, default=str)
    return TOKEN in text or KEY in text


def plain(name: str = "plain", **options: Any) -> Any:
    options.setdefault("idempotency_key", lambda i: f"{name}:{i.get('n', 0)}")
    options.setdefault("tenant", "none")
    options.setdefault("retry", {"attempts": 1, "jitter": False})

    def body(run: JobRun[dict[str, Any]]) -> None:
        run.step.run("first", lambda: 1)
        run.step.run("second", lambda: 2)

    return job(name=name, **options)(body)


# -- redaction ---------------------------------------------------------------------------------


def test_a_secret_is_stored_sealed_and_reaches_the_body_in_clear(jobs: JobsEnv) -> None:
    seen: list[str] = []

    @job(input=Deliver, idempotency_key=lambda i: f"deliver:{i.url}", tenant="none")
    def deliver(run: JobRun[Deliver]) -> None:
        seen.append(run.input.token.get_secret_value())
        seen.append(run.input.auth.key.get_secret_value())

    queued = deliver.enqueue(deliver_input())
    stored = jobs.driver.operator.get(queued.id)
    assert stored is not None and not leaks(dict(stored.input))
    assert is_envelope(stored.input["token"]) and is_envelope(stored.input["auth"]["key"])
    assert stored.input["url"] == "https://example.test/hook" and stored.input["auth"]["user"] == "ops"
    run_jobs(jobs.driver, clock=jobs.clock)
    assert seen == [TOKEN, KEY]


def test_an_enqueued_model_instance_keeps_its_secret(jobs: JobsEnv) -> None:
    @job(input=Deliver, idempotency_key=lambda i: f"deliver:{i.url}", tenant="none")
    def deliver_model(run: JobRun[Deliver]) -> None: ...

    queued = deliver_model.enqueue(Deliver.model_validate(deliver_input()))
    stored = jobs.driver.operator.get(queued.id)
    assert stored is not None and not leaks(dict(stored.input)) and unseal(stored.input)["token"] == TOKEN


def test_inspect_job_masks_secrets_and_scrubs_them_from_errors_steps_and_progress(jobs: JobsEnv) -> None:
    @job(input=Deliver, idempotency_key=lambda i: f"deliver:{i.url}", tenant="none", retry={"attempts": 1})
    def leaky(run: JobRun[Deliver]) -> None:
        token = run.input.token.get_secret_value()
        run.step.run("sign", lambda: {"header": f"Bearer {token}", "n": 1})
        run.progress(1, 2, f"using {run.input.auth.key.get_secret_value()}")
        raise RuntimeError(f"the endpoint refused {token}")

    queued = leaky.enqueue(deliver_input(backups=["backup-secret-1"]))
    run_jobs(jobs.driver, clock=jobs.clock)

    detail = operator.inspect_job(queued.id)
    data = detail.as_dict()
    assert not leaks(data) and "backup-secret-1" not in json.dumps(data)
    assert data["input"] == {
        "url": "https://example.test/hook",
        "token": MASK,
        "auth": {"user": "ops", "key": MASK},
        "backups": [MASK],
        "org_id": "org-1",
    }
    assert data["state"] == "dead"
    assert data["steps"][0]["name"] == "sign" and data["steps"][0]["output"] == {"header": MASK, "n": 1}  # sealed
    assert data["progress"]["note"] == f"using {MASK}"
    assert data["error"]["message"] == f"RuntimeError: the endpoint refused {MASK}"
    assert "Traceback" in data["error"]["stack"] and "X_JOB_MAX_ATTEMPTS" in data["error"]["stack"]
    assert data["last_error"] == data["error"]["message"]
    assert data["backfill"] is None  # the ledger row of a backfill's pass; this job ran none

    page = operator.list_jobs(name="leaky")
    assert [r.input["token"] for r in page.rows] == [MASK]
    assert not leaks(page.as_dict())


def test_a_job_this_process_does_not_declare_shows_its_secrets_masked_and_the_rest_as_it_is(jobs: JobsEnv) -> None:
    """A web process that never imports the job module, or a job renamed while its dead letters remain:
    the row itself says where its secrets are (its envelopes), so no declaration is needed."""

    @job(input=Deliver, name="elsewhere.job", idempotency_key=lambda i: f"deliver:{i.url}", tenant="none")
    def elsewhere(run: JobRun[Deliver]) -> None: ...

    queued = elsewhere.enqueue(deliver_input(backups=["backup-secret-1"]))
    registry.unregister("elsewhere.job")
    shown = operator.inspect_job(queued.id).job.input
    assert shown == {
        "url": "https://example.test/hook",
        "token": MASK,
        "auth": {"user": "ops", "key": MASK},
        "backups": [MASK],
        "org_id": "org-1",
    }
    page = operator.list_jobs(name="elsewhere.job")
    assert not leaks(page.as_dict()) and "backup-secret-1" not in str(page.as_dict())


def test_every_secret_position_is_sealed_masked_and_opened_back() -> None:
    class Node(pydantic.BaseModel):
        secret: SecretStr | None = None
        children: list[Node] = []

    @dataclasses.dataclass
    class Pair:
        left: str
        right: SecretStr

    class Typed(TypedDict):
        pin: SecretStr

    class Keys(pydantic.RootModel[list[SecretStr]]):
        pass

    class Nest(pydantic.RootModel[list["Nest"] | dict[str, SecretStr]]):
        pass

    class Everything(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(populate_by_name=True)

        plain: str
        maybe: int | SecretStr
        by_key: dict[str, SecretStr]
        pairs: tuple[Pair, ...]
        typed: Typed
        amount: pydantic.Secret[int]
        tree: Node
        keys: Keys
        nest: Nest
        aliased: SecretStr = pydantic.Field(alias="Aliased")

    payload = {
        "plain": "p",
        "maybe": "maybe-secret",
        "by_key": {"a": "s1", "b": "s2"},
        "pairs": [{"left": "l", "right": "r-secret"}],
        "typed": {"pin": "pin-1"},
        "amount": 12345,
        "tree": {"secret": None, "children": [{"secret": "child-secret", "children": []}]},
        "keys": ["k1", "k2"],
        "nest": [[{"a": "n-1"}], {"b": "n-2"}],
        "Aliased": "al-secret",
    }
    parsed = Everything.model_validate(payload)
    stored = seal_model(parsed)
    assert redact(stored) == {
        "plain": "p",
        "maybe": MASK,
        "by_key": {"a": MASK, "b": MASK},
        "pairs": [{"left": "l", "right": MASK}],
        "typed": {"pin": MASK},
        "amount": MASK,
        "tree": {"secret": None, "children": [{"secret": MASK, "children": []}]},
        "keys": [MASK, MASK],
        "nest": [[{"a": MASK}], {"b": MASK}],
        "aliased": MASK,
    }
    clear = {"maybe-secret", "s1", "s2", "r-secret", "pin-1", "12345", "child-secret", "k1", "n-1", "al-secret"}
    assert clear <= secret_values(stored)
    assert not [value for value in clear if len(value) >= 5 and value in json.dumps(stored)]  # "s1" may be base64
    assert Everything.model_validate(unseal(stored)) == parsed
    assert seal_model(Everything.model_validate({**payload, "maybe": 7}))["maybe"] == 7  # an int is no secret


def test_scrub_skips_values_too_short_to_scrub_safely() -> None:
    assert scrub("a b abcd", {"a", "abcd"}) == f"a b {MASK}"
    assert scrub({"k": ["xabcdx", 3]}, {"abcd"}) == {"k": [f"x{MASK}x", 3]}


def test_seal_model_seals_only_secrets_and_clear_model_reveals_them() -> None:
    class Mixed(pydantic.BaseModel):
        at: Any
        bytes_: SecretBytes
        nested: list[Auth]

    mixed = Mixed(at={"x": 1}, bytes_=SecretBytes(b"raw-bytes"), nested=[Auth(user="u", key=SecretStr("k-1"))])
    sealed = seal_model(mixed)
    assert sealed["at"] == {"x": 1} and sealed["nested"][0]["user"] == "u"
    assert is_envelope(sealed["bytes_"]) and is_envelope(sealed["nested"][0]["key"])
    clear = {"at": {"x": 1}, "bytes_": "raw-bytes", "nested": [{"user": "u", "key": "k-1"}]}
    assert unseal(sealed) == clear_model(mixed) == clear
    assert Mixed.model_validate(unseal(sealed)).bytes_.get_secret_value() == b"raw-bytes"
    open_model = pydantic.create_model("OpenModel", n=(int, 0), at=(Any, None))(n=3, at={"k": [1]})
    assert seal_model(open_model) == open_model.model_dump(mode="json") == {"n": 3, "at": {"k": [1]}}


def test_an_input_holding_the_envelope_key_in_clear_is_refused(jobs: JobsEnv) -> None:
    """A clear value must never read as a sealed one: the key is reserved, with or without a model."""

    class Open(pydantic.BaseModel):
        data: list[dict[str, Any]]

    @job(input=Open, idempotency_key=lambda i: "k", tenant="none")
    def typed(run: JobRun[Open]) -> None: ...

    for handle in (typed, plain("untyped")):
        with raises_code("X_VALIDATION") as caught:
            handle.enqueue({"data": [{"$uj.secret": "forged"}]})
        assert "$.data[0]" in caught.value.message and "rename" in caught.value.message
    assert operator.list_jobs().rows == ()


# -- list and inspect --------------------------------------------------------------------------


def test_list_jobs_pages_both_ways_with_the_cursors_it_answers(jobs: JobsEnv) -> None:
    handle = plain()
    ids = []
    for n in range(5):
        ids.append(handle.enqueue({"n": n}).id)
        jobs.clock.advance(1)
    first = operator.list_jobs(name="plain", limit=2)
    assert [r.id for r in first.rows] == ids[:2:-1][:2] == [ids[4], ids[3]]
    assert first.previous is None and first.next is not None and not first.is_last
    second = operator.list_jobs(name="plain", limit=2, after=first.next)
    assert [r.id for r in second.rows] == [ids[2], ids[1]] and second.previous is not None
    last = operator.list_jobs(name="plain", limit=2, after=second.next)
    assert [r.id for r in last.rows] == [ids[0]] and last.next is None and last.is_last
    back = operator.list_jobs(name="plain", limit=2, before=last.previous)
    assert [r.id for r in back.rows] == [ids[2], ids[1]] and back.next is not None and back.previous is not None
    top = operator.list_jobs(name="plain", limit=2, before=back.previous)
    assert [r.id for r in top.rows] == [ids[4], ids[3]]  # a full page: whether anything is newer is unknown
    beyond = operator.list_jobs(name="plain", limit=2, before=top.previous)
    assert beyond.rows == () and beyond.previous is None
    data = first.as_dict()
    assert set(data) == {"rows", "limit", "next", "previous", "order", "window"} and data["rows"][0]["id"] == ids[4]
    assert (data["order"], data["window"]) == ("-created", None)


def test_list_filters_and_dead_letters(jobs: JobsEnv) -> None:
    handle = plain(retry={"attempts": 1})
    done = handle.enqueue({"n": 1}).id
    run_jobs(jobs.driver, clock=jobs.clock)
    jobs.clock.advance(10)
    waiting = handle.enqueue({"n": 2}, delay="1h").id
    dead = jobs.driver.enqueue(request("plain", queue="default", key="dead-1")).id
    claimed = jobs.driver.claim(queues=["default"], limit=1, worker_id="w").jobs[0]
    assert jobs.driver.nack(claimed.id, claimed.ref, NackOptions(error="boom", code="X_BOOM", dead_letter=True))
    assert [r.id for r in operator.list_jobs(state="done").rows] == [done]
    assert [r.id for r in operator.list_jobs(state="delayed").rows] == [waiting]
    assert [r.id for r in operator.inspect_dead_letters().rows] == [dead]
    assert operator.inspect_dead_letters().rows[0].last_code == "X_BOOM"
    assert [r.id for r in operator.list_jobs(id_prefix=done[:8]).rows] == [done]
    created = operator.inspect_job(done).job.created_at_ms
    assert [r.id for r in operator.list_jobs(created_to_ms=created + 1).rows] == [done]
    assert done not in [r.id for r in operator.list_jobs(created_from_ms=created + 1).rows]


def test_list_refusals_are_page_invalid(jobs: JobsEnv) -> None:
    with raises_code("X_JOB_PAGE_INVALID"):
        operator.list_jobs(limit=201)
    with raises_code("X_JOB_PAGE_INVALID") as info:
        operator.list_jobs(after="not-a-cursor")
    assert info.value.meta == {"cursor": "after"}


def test_inspect_job_answers_the_trace_in_step_order(jobs: JobsEnv) -> None:
    queued = plain().enqueue({"n": 1})
    run_jobs(jobs.driver, clock=jobs.clock)
    detail = operator.inspect_job(queued.id)
    assert [(s.name, s.status, s.output) for s in detail.steps] == [("first", "done", 1), ("second", "done", 2)]
    assert detail.error is None and detail.job.state == "done" and detail.steps[0].duration_ms == 0
    with raises_code("X_JOB_NOT_FOUND"):
        operator.inspect_job(UNKNOWN)
    with raises_code("X_JOB_ID_INVALID"):  # no UUID: refused before the driver is asked
        operator.inspect_job("no-such-job")


# -- actions on one job ------------------------------------------------------------------------


def dead_letter(env: JobsEnv, handle: Any, n: int = 1) -> str:
    job_id: str = handle.enqueue({"n": n}).id
    claimed = env.driver.claim(queues=[handle.queue], limit=1, worker_id="w").jobs[0]
    assert claimed.id == job_id
    assert env.driver.nack(job_id, claimed.ref, NackOptions(error="boom", dead_letter=True))
    return job_id


def test_retry_requeues_a_finished_job_and_refuses_the_rest(jobs: JobsEnv) -> None:
    handle = plain()
    dead = dead_letter(jobs, handle)
    result = operator.retry_job(dead)
    assert (result.action, result.id, result.job and result.job.state) == ("retry", dead, "ready")
    with raises_code("X_JOB_NOT_REQUEUEABLE") as info:
        operator.retry_job(dead)
    assert info.value.meta["state"] == "ready"
    with raises_code("X_JOB_NOT_FOUND"):
        operator.retry_job(UNKNOWN)
    run_jobs(jobs.driver, clock=jobs.clock)
    again = operator.retry_from_step(dead, "second")
    assert again.job is not None and again.job.state == "ready"
    assert [s.name for s in operator.inspect_job(dead).steps] == ["first"]
    run_jobs(jobs.driver, clock=jobs.clock)
    with raises_code("X_JOB_NOT_FOUND") as missing:
        operator.retry_job(dead, from_step="never")
    assert missing.value.meta["step"] == "never"
    handle.enqueue({"n": 1})  # a live job now holds the key
    with raises_code("X_JOB_DUPLICATE"):
        operator.retry_job(dead)


def test_cancel_stops_a_live_job_and_answers_not_cancellable_otherwise(jobs: JobsEnv) -> None:
    handle = plain()
    live = handle.enqueue({"n": 1}).id
    result = operator.cancel_job(live, "runaway")
    assert result.job is not None and result.job.state == "cancelled"
    assert operator.inspect_job(live).job.last_error == "cancelled: runaway"
    with raises_code("X_JOB_NOT_CANCELLABLE") as info:
        operator.cancel_job(live)
    assert info.value.meta == {"job_id": live, "state": "cancelled"}
    with raises_code("X_JOB_NOT_CANCELLABLE") as unknown:
        operator.cancel_job(UNKNOWN)
    assert unknown.value.meta == {"job_id": UNKNOWN, "state": None}


def test_remove_and_promote(jobs: JobsEnv) -> None:
    handle = plain()
    later = handle.enqueue({"n": 1}, delay="1h").id
    promoted = operator.promote_job(later)
    assert promoted.job is not None and promoted.job.state == "ready"
    assert promoted.job.run_at_ms == jobs.clock.now_ms()
    with raises_code("X_JOB_NOT_PROMOTABLE"):
        operator.promote_job(later)
    running = jobs.driver.claim(queues=["default"], limit=1, worker_id="w").jobs[0].id
    with raises_code("X_JOB_NOT_REMOVABLE"):
        operator.remove_job(running)
    operator.cancel_job(running)
    assert operator.remove_job(running).as_dict() == {"action": "remove", "id": running, "job": None}
    with raises_code("X_JOB_NOT_FOUND"):
        operator.remove_job(running)
    with raises_code("X_JOB_NOT_FOUND"):
        operator.promote_job(running)


# -- bulk --------------------------------------------------------------------------------------


def test_bulk_actions_loop_until_nothing_remains(jobs: JobsEnv) -> None:
    total = MAX_BULK_ROWS * 2 + 5
    jobs.driver.enqueue_many(
        [request("bulk", queue="bulk", run_at_ms=jobs.clock.now_ms() + 60_000) for _ in range(total)]
    )
    seen: list[BulkOutcome] = []
    promoted = operator.promote_many(state="delayed", queue="bulk", until_done=True, on_progress=seen.append)
    assert (promoted.affected, promoted.remaining, promoted.calls) == (total, 0, 3)
    assert [(o.affected, o.remaining) for o in seen] == [(1000, total - 1000), (2000, 5), (total, 0)]
    assert promoted.as_dict()["filter"] == {"state": "delayed", "queue": "bulk"}

    one = operator.remove_many(state="ready", queue="bulk")
    assert (one.affected, one.remaining, one.calls) == (MAX_BULK_ROWS, total - MAX_BULK_ROWS, 1)
    for row in operator.list_jobs(queue="bulk", limit=200).rows[:3]:
        operator.cancel_job(row.id)
    requeued = operator.requeue_many(state="cancelled", queue="bulk", until_done=True)
    assert (requeued.affected, requeued.remaining, requeued.calls) == (3, 0, 1)
    removed = operator.remove_many(state="ready", name="bulk", until_done=True)
    assert (removed.affected, removed.remaining) == (total - MAX_BULK_ROWS, 0)

    with raises_code("X_JOB_NOT_REQUEUEABLE"):
        operator.requeue_many(state="ready")
    with raises_code("X_JOB_NOT_REMOVABLE"):
        operator.remove_many(state="running")
    with raises_code("X_JOB_NOT_PROMOTABLE"):
        operator.promote_many(state="done")


# -- queues, workers, tasks, stats, manifest -----------------------------------------------------


def test_queues_show_depth_pauses_and_declared_queues(jobs: JobsEnv) -> None:
    plain(queue="mail").enqueue({"n": 1})
    state = operator.pause_queue("mail")
    assert state.as_dict() == {"kind": "queue", "name": "mail", "paused": True, "declared": True}
    assert operator.pause_queue("typo").declared is False
    rows = {q.queue: q for q in operator.inspect_queues()}
    assert rows["mail"].ready == 1 and rows["mail"].paused and rows["mail"].declared
    assert rows["typo"].paused and not rows["typo"].declared and rows["typo"].ready == 0
    assert operator.resume_queue("mail").paused is False
    assert not {q.queue: q for q in operator.inspect_queues()}["mail"].paused
    assert set(rows["mail"].as_dict()) >= {"queue", "ready", "dead", "oldest_ready_ms", "paused"}


def test_workers_are_the_live_registry(jobs: JobsEnv) -> None:
    info = WorkerInfo("w-1", "host-a", 42, jobs.clock.now_ms(), ("default",), 4, ("j1",), jobs.clock.now_ms())
    jobs.driver.record_worker(info)
    [row] = operator.inspect_workers()
    assert row.as_dict() == {
        "id": "w-1",
        "host": "host-a",
        "pid": 42,
        "started_at_ms": info.started_at_ms,
        "queues": ["default"],
        "slots": 4,
        "in_flight": ["j1"],
        "heartbeat_at_ms": info.heartbeat_at_ms,
    }


def test_tasks_pause_fire_and_next_run(jobs: JobsEnv) -> None:
    handle = plain()

    @task(cron="0 3 * * *", tz="UTC")
    def nightly(occurrence_ms: int) -> Sequence[Any]:
        return [(handle, {"n": occurrence_ms})]

    jobs.driver.scheduler_state.load(["nightly"], now_ms=0)
    fired = jobs.driver.scheduler_state.fire(Fire("nightly", 0, 1_000, 1_000, [], jobs.clock.now_ms()))
    assert fired.outcome == "fired"
    assert operator.pause_task("nightly").declared is True
    assert operator.pause_task("gone-task").declared is False
    rows = {t.name: t for t in operator.inspect_tasks()}
    assert rows["nightly"].paused and rows["nightly"].last_occurrence_ms == 1_000
    assert rows["nightly"].next_run_ms == nightly.next_run(jobs.clock.now_ms())
    assert rows["nightly"].as_dict()["jobs"] == ["plain"] and rows["nightly"].as_dict()["declared"] is True
    assert rows["gone-task"].as_dict()["declared"] is False and rows["gone-task"].next_run_ms is None
    assert operator.resume_task("nightly").paused is False


def test_stats_sum_the_counters_of_the_window(jobs: JobsEnv) -> None:
    plain().enqueue({"n": 1})
    plain(name="other").enqueue({"n": 2})
    run_jobs(jobs.driver, clock=jobs.clock)
    view = operator.inspect_stats(since="1h")
    assert [(t.job, t.done) for t in view.jobs] == [("other", 1), ("plain", 1)]
    assert view.total.done == 2 and view.as_dict()["total"]["job"] == "*"
    jobs.clock.advance(2 * 3_600_000)
    assert operator.inspect_stats(since="1h").jobs == ()


def test_manifest_is_sorted_and_stable(jobs: JobsEnv, tmp_path: Path) -> None:
    handle = plain(name="zeta")
    plain(name="alpha", input=Deliver)

    @task(cron="*/5 * * * *", tz="UTC")
    def every_five(occurrence_ms: int) -> Sequence[Any]:
        return [(handle, {"n": occurrence_ms})]

    manifest = operator.inspect_manifest()
    names = [j.name for j in manifest.jobs]
    assert names.index("alpha") < names.index("zeta") and names == sorted(names)
    assert [t.name for t in manifest.tasks] == sorted(t.name for t in manifest.tasks)
    path = operator.write_manifest(tmp_path / "x.manifest.json")
    text = path.read_text()
    assert text == operator.manifest_json() and text.endswith("}\n")
    assert json.loads(text)["tasks"][0]["jobs"] == ["zeta"]


# -- a driver without an operator store ---------------------------------------------------------


class BareDriver:
    """A hand-rolled driver: the queue protocol's reads, and no operator surface."""

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
        return [QueueStats(queue="default", ready=2)]


def test_a_driver_without_an_operator_store_is_not_implemented(jobs: JobsEnv) -> None:
    bare: Any = BareDriver()
    for call in (
        lambda: operator.list_jobs(driver=bare),
        lambda: operator.inspect_job(UNKNOWN, driver=bare),
        lambda: operator.retry_job(UNKNOWN, driver=bare),
        lambda: operator.remove_job(UNKNOWN, driver=bare),
        lambda: operator.promote_job(UNKNOWN, driver=bare),
        lambda: operator.requeue_many(state="dead", driver=bare),
        lambda: operator.pause_queue("q", driver=bare),
        lambda: operator.pause_task("t", driver=bare),
        lambda: operator.inspect_workers(driver=bare),
        lambda: operator.inspect_tasks(driver=bare),
        lambda: operator.inspect_stats(driver=bare),
    ):
        with raises_code("X_NOT_IMPLEMENTED"):
            call()
    with raises_code("X_JOB_NOT_CANCELLABLE"):  # the spec's answer for a driver with no cancel
        operator.cancel_job(UNKNOWN, driver=bare)
    assert {q.queue: q.ready for q in operator.inspect_queues(driver=bare)}["default"] == 2
