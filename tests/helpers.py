"""Test helpers that are not fixtures."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from django.core.management import CommandError, call_command
from django.db import connection

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
    alias = None
    visibility_timeout_ms = 30_000
    supports_wake = False
    supports_listen = False
    introspect = None
    leases = None
    leader = None
    scheduler_state = None
    backfills = None

    def stats(self) -> list[QueueStats]:
        return [QueueStats(queue="default", ready=2)]


@dataclass
class Result:
    """One run of a management command: its exit code and what it printed."""

    code: int
    out: str
    err: str

    @property
    def json(self) -> Any:
        return json.loads(self.out)


def command(name: str, *args: str, err: io.StringIO | None = None) -> Result:
    """Run ``manage.py <name> <args>`` through ``call_command``. A non-zero exit is the ``CommandError``'s
    ``returncode`` (1: an operator error, 2: usage); a usage error's text is appended to ``err``."""
    out, err = io.StringIO(), err if err is not None else io.StringIO()
    try:
        call_command(name, *args, stdout=out, stderr=err)
        code = 0
    except CommandError as exc:
        code = exc.returncode
        if code == 2:
            err.write(str(exc))
    return Result(code, out.getvalue(), err.getvalue())


REPO = Path(__file__).resolve().parents[1]


def manage_py(settings: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run ``python manage.py *argv`` in a real process with ``DJANGO_SETTINGS_MODULE=settings`` on this
    test's database (its rows must be committed: ``transactional_db``)."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": settings, "ULTIMATE_JOBS_TEST_DB": connection.settings_dict["NAME"]}
    argv_ = [sys.executable, "manage.py", *argv]
    return subprocess.run(argv_, cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)
