"""A user's callable, plain or ``async def``, called from a feature's sync job body.

The factories (``backfill(handle=..., count=...)``, ``export_rows(row=...)``, ``webhook(endpoint=...,
event=...)``) run their pass in a sync body on a worker slot. An ``async def`` callable handed to them is
run to completion there (asgiref's ``async_to_sync``): the coroutine gets an event loop of its own, and
every ``sync_to_async(thread_sensitive=True)`` call it makes — Django's async ORM is built on them — comes
back to the slot's own thread. So the async ORM in such a callable uses the slot's connection, inside the
transaction the pass holds (a backfill's page), under the run's org (context variables are copied both
ways), and the run's cancel signal is the one it was handed. An async *generator* function answers no
value to wait for: it is refused where it is handed over (``X_JOB_ASYNC_UNSUPPORTED``).

>>> fetch = accept_async(fetch_endpoint, what="webhook 'partner': endpoint", meta={"job": "partner"})
>>> fetch(input)   # a plain def is called; an async def is awaited to its answer
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from ..guards.sync_only import call_to_completion, is_coroutine_callable, refuse_async


def accept_async(fn: Callable[..., Any], *, what: str, meta: Mapping[str, Any]) -> Callable[..., Any]:
    """``fn`` itself when it is a plain function; when it is a coroutine callable, a plain function that
    runs it to completion — decided once, where the feature is declared, so a call costs no check. An
    async generator function is ``X_JOB_ASYNC_UNSUPPORTED``, the message starting with ``what``."""
    refuse_async(fn, what=what, meta=meta, allow_coroutines=True)
    return functools.partial(call_to_completion, fn) if is_coroutine_callable(fn) else fn
