"""The plan a handle makes once, and the refusals that still fire: what the declaration decides is decided at
``@job`` — whether its input model can hold a secret (``handle.seals``), whether there is a concurrency key,
a rate key or a schedule to derive — and a plain dict input (or a model's JSON dump) is checked in one walk
(``clean_json``), ``check_request`` then not walking it again (``EnqueueRequest.input_checked``). Each check
the plan skips for a job that does not declare it is shown skipped there, and firing for a job that does;
each check the one walk replaces still refuses what it refused."""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pydantic
import pytest

from tests.conftest import JobsEnv
from ultimate_jobs import Concurrency, JobRun, job
from ultimate_jobs.contracts.jobs import EnqueueRequest
from ultimate_jobs.contracts.operator import JobFilter
from ultimate_jobs.core import definition
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.guards import admission
from ultimate_jobs.guards.admission import MAX_JSON_DEPTH, check_request, clean_json
from ultimate_jobs.guards.sealing import ENVELOPE_KEY, is_envelope


def stored(env: JobsEnv) -> int:
    assert env.driver.operator is not None
    return len(env.driver.operator.list(JobFilter()).rows)


def model_less() -> Any:
    @job(name="plain", idempotency_key=lambda i: str(i["k"]), tenant="none")
    def plain(run: JobRun[Any]) -> None:
        return None

    return plain


class Loud(pydantic.BaseModel):
    k: str
    note: str

    @pydantic.field_validator("note")
    @classmethod
    def shout(cls, value: str) -> str:
        return value.replace("!", "\x00")  # a validator that makes what no database text can hold


def test_a_model_less_jobs_request_is_walked_once_and_a_nul_deep_in_it_is_still_refused(jobs: JobsEnv) -> None:
    plain = model_less()
    request = plain.build_request({"k": "1", "deep": {"list": ["ok", {"x": "ok"}]}})
    assert request.input_checked  # its payload holds the values build_request walked
    with pytest.raises(UltimateError) as caught:
        plain.enqueue({"k": "2", "deep": {"list": ["ok", {"x": "n\x00ul"}]}})
    assert caught.value.code == "X_JOB_REQUEST_INVALID" and stored(jobs) == 0


def test_a_mapping_that_is_not_a_dict_is_walked_again_by_the_request_check(jobs: JobsEnv) -> None:
    plain = model_less()
    proxy: Mapping[str, Any] = MappingProxyType({"k": "1", "deep": {"x": "n\x00ul"}})
    assert not plain.build_request(MappingProxyType({"k": "1"})).input_checked
    with pytest.raises(UltimateError) as caught:
        plain.enqueue(proxy)
    assert caught.value.code == "X_JOB_REQUEST_INVALID" and stored(jobs) == 0


def test_a_payload_a_model_produced_is_walked_and_a_nul_its_validator_made_is_refused(jobs: JobsEnv) -> None:
    @job(name="loud", input=Loud, idempotency_key=lambda i: i.k, tenant="none")
    def loud(run: JobRun[Loud]) -> None:
        return None

    assert loud.build_request({"k": "1", "note": "calm"}).input_checked  # its dump passed the one walk
    assert not loud.build_request({"k": "1", "note": "hey!"}).input_checked  # it did not: the full checks run
    with pytest.raises(UltimateError) as caught:
        loud.enqueue({"k": "2", "note": "hey!"})
    assert caught.value.code == "X_JOB_REQUEST_INVALID" and stored(jobs) == 0


def test_a_request_built_by_hand_is_walked() -> None:
    request = EnqueueRequest(
        name="by-hand", queue="default", input={"x": "n\x00ul"}, idempotency_key="k", tenant_id=None, max_attempts=1
    )
    with pytest.raises(UltimateError) as caught:
        check_request(request)
    assert caught.value.code == "X_JOB_REQUEST_INVALID"


def stored_input(env: JobsEnv) -> Any:
    assert env.driver.operator is not None
    (row,) = env.driver.operator.list(JobFilter()).rows
    return env.driver.operator.get(row.id).input  # type: ignore[union-attr]


def refuse_if_called(*_: Any, **__: Any) -> Any:
    raise AssertionError("the plan should have skipped this check")


class Plain(pydantic.BaseModel):
    k: str
    amount: float = 1.0
    tags: list[str] = []


class WithSecret(pydantic.BaseModel):
    k: str
    card: pydantic.SecretStr


class Untyped(pydantic.BaseModel):
    k: str
    extra: Any = None


def test_a_model_without_secrets_is_not_walked_for_them_and_one_that_declares_one_is_sealed(
    jobs: JobsEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    @job(name="plain-model", input=Plain, idempotency_key=lambda i: i.k, tenant="none")
    def plain_model(run: JobRun[Plain]) -> None:
        return None

    @job(name="secret-model", input=WithSecret, idempotency_key=lambda i: i.k, tenant="none")
    def secret_model(run: JobRun[WithSecret]) -> None:
        return None

    assert not plain_model.seals and secret_model.seals
    with monkeypatch.context() as patched:
        patched.setattr(definition, "seal_model", refuse_if_called)
        plain_model.enqueue({"k": "1", "tags": ["a"]})
    assert stored_input(jobs) == {"k": "1", "amount": 1.0, "tags": ["a"]}
    secret_model.enqueue({"k": "2", "card": "4242 4242"})
    rows = {r.name: r for r in jobs.driver.operator.list(JobFilter()).rows}  # type: ignore[union-attr]
    card = jobs.driver.operator.get(rows["secret-model"].id).input["card"]  # type: ignore[union-attr]
    assert is_envelope(card) and "4242" not in str(card)


def test_a_field_that_may_hold_a_secret_at_run_time_keeps_the_sealing_walk(jobs: JobsEnv) -> None:
    @job(name="untyped", input=Untyped, idempotency_key=lambda i: i.k, tenant="none")
    def untyped(run: JobRun[Untyped]) -> None:
        return None

    assert untyped.seals  # Any can hold a SecretStr: the plan keeps the walk
    untyped.enqueue({"k": "1", "extra": pydantic.SecretStr("pin-1234")})
    extra = stored_input(jobs)["extra"]
    assert is_envelope(extra) and "1234" not in str(extra)


def test_the_reserved_key_is_still_refused_in_a_plain_dict_and_in_a_model_without_secrets(jobs: JobsEnv) -> None:
    plain = model_less()

    class Bag(pydantic.BaseModel):
        k: str
        meta: dict[str, str] = {}

    @job(name="bag", input=Bag, idempotency_key=lambda i: i.k, tenant="none")
    def bag(run: JobRun[Bag]) -> None:
        return None

    assert not bag.seals
    for enqueue in (
        lambda: plain.enqueue({"k": "1", "deep": [{ENVELOPE_KEY: "forged"}]}),
        lambda: bag.enqueue({"k": "1", "meta": {ENVELOPE_KEY: "forged"}}),
    ):
        with pytest.raises(UltimateError) as caught:
            enqueue()
        assert caught.value.code == "X_VALIDATION" and ENVELOPE_KEY in caught.value.message
    assert stored(jobs) == 0


def test_the_one_walk_refuses_what_the_full_checks_refuse(jobs: JobsEnv) -> None:
    plain = model_less()
    deep: Any = "leaf"
    for _ in range(MAX_JSON_DEPTH + 1):
        deep = [deep]
    cases = {
        "X_JOB_REQUEST_INVALID": [{"k": "1", "x": deep}, {"k": "1", "x": "\ud800"}, {"k": "1", "n\x00": 1}],
        "X_VALIDATION": [{"k": "1", "x": float("nan")}, {"k": "1", "x": object()}, {"k": "1", "x": {1.5j: 1}}],
    }
    for code, inputs in cases.items():
        for value in inputs:
            assert not clean_json(value)
            with pytest.raises(UltimateError) as caught:
                plain.enqueue(value)
            assert caught.value.code == code, value
    assert stored(jobs) == 0


def test_input_the_one_walk_does_not_prove_plain_is_still_stored_when_json_holds_it(jobs: JobsEnv) -> None:
    plain = model_less()
    assert not clean_json({"k": "1", 7: "a number key"})  # not proven: the full checks take it, and pass it
    plain.enqueue({"k": "1", 7: "a number key", "t": (1, 2)})
    assert json.loads(json.dumps(stored_input(jobs))) == {"k": "1", "7": "a number key", "t": [1, 2]}


def test_a_job_without_a_rate_key_derives_none_and_one_with_a_raising_rate_key_is_refused(
    jobs: JobsEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = model_less()

    @job(name="rated", idempotency_key=lambda i: i["k"], tenant="none", rate_limit="5/s", rate_key=lambda i: i["org"])
    def rated(run: JobRun[Any]) -> None:
        return None

    monkeypatch.setattr(plain, "derive_rate_key", refuse_if_called)
    plain.enqueue({"k": "1"})
    with pytest.raises(UltimateError) as caught:
        rated.enqueue({"k": "2"})  # no "org": rate_key raises KeyError
    assert caught.value.code == "X_JOB_RATE_KEY_INVALID" and stored(jobs) == 1


def test_a_job_without_a_concurrency_key_derives_none_and_one_whose_key_is_blank_is_refused(
    jobs: JobsEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = model_less()

    @job(
        name="keyed",
        idempotency_key=lambda i: i["k"],
        tenant="none",
        concurrency=Concurrency(key=lambda i: i.get("account", ""), limit=1),
    )
    def keyed(run: JobRun[Any]) -> None:
        return None

    monkeypatch.setattr(plain, "derive_concurrency_key", refuse_if_called)
    assert plain.build_request({"k": "1"}).concurrency_key is None
    assert keyed.build_request({"k": "1", "account": "a-1"}).concurrency_key == "a-1"
    with pytest.raises(UltimateError) as caught:
        keyed.enqueue({"k": "2"})
    assert caught.value.code == "X_JOB_DECLARATION_INVALID" and stored(jobs) == 0


def test_an_enqueue_with_no_schedule_reads_no_clock_and_a_bad_schedule_is_still_refused(
    jobs: JobsEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = model_less()
    with monkeypatch.context() as patched:
        patched.setattr(admission, "scheduled_ms", refuse_if_called)
        assert plain.build_request({"k": "1"}).run_at_ms is None
    with pytest.raises(UltimateError) as caught:
        plain.enqueue({"k": "2"}, delay=-5)
    assert caught.value.code == "X_JOB_REQUEST_INVALID" and stored(jobs) == 0
