"""A user's callable, plain or ``async def``, called from a feature's sync job body.

The factories (``backfill(handle=...)``, ``export_rows(row=...)``, ``webhook(endpoint=..., event=...)``)
run their pass in a sync body on a worker slot. An ``async def`` callable handed to them is run to
completion there with ``asgiref.sync.async_to_sync``: the coroutine gets an event loop of its own, and
every ``sync_to_async(thread_sensitive=True)`` call it makes — Django's async ORM is built on them — comes
back to the slot's own thread. So the async ORM in such a callable uses the slot's connection, inside the
transaction the pass holds (a backfill's page), under the run's org (context variables are copied both
ways), and the run's cancel signal is the one it was handed.

An async *generator* function answers no value to wait for: it is refused at declaration
(``X_JOB_ASYNC_UNSUPPORTED``), as it is anywhere else.

>>> as_sync(fetch_endpoint)(input)   # a plain def is called; an async def is awaited to its answer
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from asgiref.sync import async_to_sync

from ..errors import AsyncUnsupportedError
from ..guards.sync_only import is_async_callable


def is_async_user_callable(fn: object, *, what: str, meta: dict[str, Any]) -> bool:
    """Whether ``fn`` is an ``async def`` (or an object or ``functools.partial`` over one) that
    :func:`as_sync` runs; an async generator function is ``X_JOB_ASYNC_UNSUPPORTED``, its message starting
    with ``what``."""
    if not is_async_callable(fn):
        return False
    if inspect.isasyncgenfunction(_unwrapped(fn)):
        name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
        raise AsyncUnsupportedError(
            f"{what} is an async generator function ({name}), which answers no value to wait for; write it as "
            "an async def that returns its answer (or a plain def)",
            {**meta, "callable": name},
        )
    return True


def as_sync(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` itself when it is a plain function; ``async_to_sync(fn)`` when it is async — decided once,
    where the feature is declared, so a call costs no check."""
    return async_to_sync(fn) if is_async_callable(fn) else fn


def _unwrapped(fn: object) -> object:
    while isinstance(fn, functools.partial):
        fn = fn.func
    if callable(fn) and not inspect.isroutine(fn) and not isinstance(fn, type):
        return type(fn).__call__
    return fn
