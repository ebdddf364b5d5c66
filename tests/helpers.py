"""Test helpers that are not fixtures."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from ultimate_jobs.drivers.base import QueueStats

T = TypeVar("T")

_UNSET = object()


def eventually(fn: Callable[[], T], timeout: float = 5.0, interval: float = 0.01) -> T:
    """Poll ``fn`` until it returns a truthy value, and return that value.

    A falsy return or an ``AssertionError`` from ``fn`` means "not yet". After ``timeout``
    seconds this raises ``AssertionError`` naming the last value (or chaining the last
    assertion). This is the one bounded wait for things outside the frozen clock, such as
    worker processes::

        eventually(lambda: Job.objects.get(pk=job_id).state == "done")
    """
    deadline = time.monotonic() + timeout
    last: object = _UNSET
    last_error: AssertionError | None = None
    while True:
        try:
            value = fn()
        except AssertionError as exc:
            last_error = exc
        else:
            if value:
                return value
            last, last_error = value, None
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    if last_error is not None:
        raise AssertionError(f"condition not met within {timeout}s: {last_error}") from last_error
    raise AssertionError(f"condition not met within {timeout}s; last value: {last!r}")


class BareDriver:
    """A hand-rolled driver with the queue protocol's reads and no operator surface (``introspect`` is
    ``None``): what the operator answers ``X_NOT_IMPLEMENTED`` on. Its stats hold one queue, ``default``,
    with two ready rows."""

    name = "bare"
    introspect = None

    def stats(self) -> list[QueueStats]:
        return [QueueStats(queue="default", ready=2)]
