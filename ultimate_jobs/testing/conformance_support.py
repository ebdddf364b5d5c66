"""Helpers the driver conformance suite builds its scenarios from (public: a driver's own tests use them too).

Everything here speaks the driver protocol of :mod:`ultimate_jobs.contracts.protocol` only, so a scenario
written with it runs unchanged on every driver.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, Literal, TypeVar
from unittest import mock

import pytest

from ..contracts.jobs import ClaimedJob, EnqueueRequest, NackOptions
from ..contracts.operator import JobRecord
from ..contracts.protocol import JobDriver, OperatorStore
from ..core import ids as core_ids
from ..errors import UltimateError

QUEUE = "conformance"
"""The queue a scenario uses unless it names one."""

JOB = "conformance.job"
"""The job name a scenario uses unless it names one."""

VT = 10_000
"""The visibility timeout every scenario claims with (ms)."""

_keys = itertools.count(1)
T = TypeVar("T")


def fixed_id(prefix: str, n: int) -> str:
    """A UUID-shaped job id with a chosen 8-hex-digit ``prefix`` — valid for a ``uuid`` or ``text`` column.

    >>> fixed_id("aaaaaaaa", 7)
    'aaaaaaaa-0000-4000-8000-000000000007'
    """
    if len(prefix) != 8 or any(c not in "0123456789abcdef" for c in prefix):
        raise ValueError("prefix must be 8 lowercase hex digits")
    return f"{prefix}-0000-4000-8000-{n:012d}"


def new_id() -> str:
    """A fresh job id nobody has used."""
    return str(uuid.uuid4())


@contextmanager
def one_millisecond() -> Iterator[None]:
    """Inside the block, every id :mod:`ultimate_jobs.core.ids` mints is stamped with the same millisecond:
    a burst of jobs enqueued at once, whose ids share their first 15 characters.

    >>> with one_millisecond():
    ...     ids = [minted_id() for _ in range(50)]
    """
    frozen = time.time_ns()
    with mock.patch.object(core_ids, "time", SimpleNamespace(time_ns=lambda: frozen)):
        yield


def minted_id() -> str:
    """A job id as a driver mints one (:func:`ultimate_jobs.core.ids.new_id`, a UUIDv7)."""
    return core_ids.new_id()


def request(
    name: str = JOB,
    *,
    key: str | None = None,
    queue: str = QUEUE,
    tenant_id: str | None = None,
    input: Mapping[str, Any] | None = None,
    max_attempts: int = 3,
    priority: int = 0,
    run_at_ms: int | None = None,
    id: str | None = None,
    run_id: str | None = None,
    on_conflict: Literal["dedupe", "error"] = "dedupe",
) -> EnqueueRequest:
    """An :class:`EnqueueRequest` with a fresh idempotency key unless ``key`` is given.

    >>> driver.enqueue(request(key="k1", tenant_id="org-1", max_attempts=1))
    """
    return EnqueueRequest(
        name=name,
        queue=queue,
        input=dict(input) if input is not None else {"n": 1},
        idempotency_key=key if key is not None else f"conformance-key-{next(_keys)}",
        tenant_id=tenant_id,
        max_attempts=max_attempts,
        priority=priority,
        run_at_ms=run_at_ms,
        id=id,
        run_id=run_id,
        on_conflict=on_conflict,
    )


StateWriter = Callable[[JobDriver, str, str], None]
"""What a driver's ``write_state`` fixture answers: store ``state`` on job ``id``'s row as raw data, past
the driver (and past a CHECK constraint), as a newer version or a hand edit would."""


def requests(n: int, **fields: Any) -> list[EnqueueRequest]:
    """``n`` requests with distinct keys, sharing every other field."""
    return [request(**fields) for _ in range(n)]


def claim(
    driver: JobDriver,
    *,
    worker: str = "w1",
    queues: Sequence[str] = (QUEUE,),
    limit: int = 100,
    visibility_timeout_ms: int = VT,
) -> list[ClaimedJob]:
    """One claim round with the suite's visibility timeout: the jobs it took."""
    got = driver.claim(queues=list(queues), limit=limit, worker_id=worker, visibility_timeout_ms=visibility_timeout_ms)
    return list(got.jobs)


def claim_one(driver: JobDriver, *, worker: str = "w1", queues: Sequence[str] = (QUEUE,)) -> ClaimedJob:
    """Claim exactly one row; fails the test when the queue hands out none."""
    got = claim(driver, worker=worker, queues=queues, limit=1)
    assert len(got) == 1, f"expected one claimable row in {list(queues)}, got {len(got)}"
    return got[0]


def claimed_ids(driver: JobDriver, *, worker: str = "w1", queues: Sequence[str] = (QUEUE,)) -> set[str]:
    """The ids one claim round hands out."""
    return {job.id for job in claim(driver, worker=worker, queues=queues)}


def finish(driver: JobDriver, job: ClaimedJob, state: Literal["done", "dead", "failed"] = "done") -> None:
    """Settle a claimed row into a finished state through the protocol."""
    if state == "done":
        landed = driver.ack(job.id, job.ref)
    else:
        landed = driver.nack(job.id, job.ref, NackOptions(dead_letter=state == "dead", fail=state == "failed"))
    assert landed, f"settling {job.id} {state} did not land"


def enqueue_finished(driver: JobDriver, req: EnqueueRequest, state: Literal["done", "dead", "failed"] = "done") -> str:
    """Enqueue ``req`` (due now), claim it and settle it ``state``; answers its id."""
    job_id = driver.enqueue(req).id
    job = claim_one(driver, queues=(req.queue,))
    assert job.id == job_id, "another due row in the queue was claimed first"
    finish(driver, job, state)
    return job_id


@contextmanager
def raises_code(code: str) -> Iterator[pytest.ExceptionInfo[UltimateError]]:
    """``pytest.raises`` for an :class:`UltimateError` whose ``.code`` is ``code``; meta is read after the block.

    >>> with raises_code("X_JOB_PAGE_INVALID") as info:
    ...     driver.operator.list(JobFilter(limit=201))
    >>> info.value.meta
    """
    with pytest.raises(UltimateError) as info:
        yield info
    assert info.value.code == code, f"expected {code}, got {info.value.code}: {info.value}"


def record(operator_store: OperatorStore, job_id: str) -> JobRecord:
    """``driver.operator.get(job_id)``, failing the test when the row is gone."""
    row = operator_store.get(job_id)
    assert row is not None, f"job {job_id} is not in the store"
    return row


def settle_done(driver: JobDriver, name: str = JOB, *, duration_ms: int | None = None) -> str:
    """Enqueue one ``name`` row, claim it and ack it with ``duration_ms``; answers its id."""
    job_id = driver.enqueue(request(name)).id
    job = claim_one(driver)
    assert job.id == job_id and driver.ack(job.id, job.ref, duration_ms=duration_ms)
    return job_id


def declared(driver: JobDriver, capability: T | None, attribute: str, meaning: str) -> T:
    """A capability the driver declares (``driver.leases``, …), or a skip of the test asking for it,
    saying why.

    >>> store = declared(driver, driver.leader, "leader", "no leader lease store")
    """
    if capability is None:
        pytest.skip(f"driver {driver.name!r} declares {attribute}=None ({meaning})")
    return capability
