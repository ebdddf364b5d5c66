"""A property of the enqueue boundary, fuzzed: whatever a caller passes as a job's input and options,
``enqueue()`` either writes a row that reads back as given, or raises a coded ``UltimateError`` — never
a driver's exception, a ``RecursionError`` or a ``ValueError``. On the memory driver and on Postgres."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import installed
from ultimate_jobs import JobRun, job
from ultimate_jobs.core import registry
from ultimate_jobs.core.definition import JobHandle
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.testing import FrozenClock

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# any code point, NUL and lone surrogates included — and those two often, not once in a million draws
nasty = st.sampled_from(["\x00", "a\x00b", "\ud800", "x\udfffy", "\U0010ffff", "", " "])
text = st.text(st.characters(codec=None, exclude_categories=()), max_size=20) | nasty
# floats past 1e15 come back from jsonb as integers (numeric keeps the digits, not the float): out of scope
floats = st.floats(min_value=-1e15, max_value=1e15) | st.sampled_from([float("nan"), float("inf"), -float("inf")])
scalars = st.none() | st.booleans() | st.integers() | floats | text
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(text, children, max_size=3),
    max_leaves=40,
)


def deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"d": value}
    return value


inputs = st.dictionaries(text, json_values, max_size=4) | st.integers(0, 200).map(deep)
instants = (
    st.none() | st.integers() | st.datetimes(timezones=st.just(UTC) | st.none()) | text | st.floats() | st.booleans()
)
delays = st.none() | st.integers() | text | st.timedeltas(min_value=timedelta(days=-1000)) | st.floats()
options = st.fixed_dictionaries(
    {},
    optional={
        "queue": st.none() | text,
        "run_at": instants,
        "delay": delays,
        "run_id": st.none() | text | st.uuids().map(str),
        "on_conflict": st.sampled_from(["dedupe", "error", "other"]),
    },
)


@pytest.fixture(params=["memory", "postgres"])
def driver(request: pytest.FixtureRequest) -> Iterator[MemoryDriver | PostgresDriver]:
    clock = FrozenClock()
    chosen = MemoryDriver(clock=clock) if request.param == "memory" else PostgresDriver(clock=clock)
    with installed(clock, chosen):

        @job(name="fuzzed", idempotency_key=lambda i: str(sorted(i)) if isinstance(i, dict) else "k", tenant="none")
        def fuzzed(run: JobRun[Any]) -> None:
            return None

        yield chosen


@FUZZ
@given(value=inputs, chosen=options)
def test_an_enqueue_writes_its_row_or_raises_a_coded_error(driver: Any, value: Any, chosen: dict[str, Any]) -> None:
    handle = registry.lookup("fuzzed")
    assert isinstance(handle, JobHandle)
    try:
        queued = handle.enqueue(value, **chosen)
    except UltimateError as error:
        assert error.code.startswith("X_") and error.message
        return
    assert driver.operator is not None
    row = driver.operator.get(queued.id)
    assert row is not None
    if not queued.deduped:
        assert row.input == value
