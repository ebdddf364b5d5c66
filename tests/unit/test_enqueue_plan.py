"""What an enqueue no longer does twice, and the refusals that still fire: ``build_request`` walks a model-less
job's raw input once, and ``check_request`` skips its second walk only when the stored payload holds exactly
those values (``EnqueueRequest.input_checked``); a payload a model produced, or a request built by hand, is
walked again. The traceparent is read only when a valid span is current."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pydantic
import pytest

from tests.conftest import JobsEnv
from ultimate_jobs import JobRun, job
from ultimate_jobs.drivers.records import EnqueueRequest, JobFilter
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.guards.admission import check_request


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


def test_a_payload_a_model_produced_is_walked_again_and_refused(jobs: JobsEnv) -> None:
    @job(name="loud", input=Loud, idempotency_key=lambda i: i.k, tenant="none")
    def loud(run: JobRun[Loud]) -> None:
        return None

    assert not loud.build_request({"k": "1", "note": "calm"}).input_checked
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
