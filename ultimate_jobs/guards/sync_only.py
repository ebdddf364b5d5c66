"""Job code is synchronous until async bodies are built: one check refuses an ``async def`` wherever a
user hands ultimate_jobs a callable, at the moment it is handed over.

Called where it would run, an async function answers a coroutine object instead of running its code: a
body would report ``completed`` with that object as its result, a step would store it, a hook would
never fire. So a coroutine function, an async generator function, an object whose ``__call__`` is one,
and a ``functools.partial`` of any of these are refused with ``X_JOB_ASYNC_UNSUPPORTED``.

>>> refuse_async(send_welcome, what="send_welcome: the job body")   # silent for a plain def
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import Any

from asgiref.sync import iscoroutinefunction

from ..errors import AsyncUnsupportedError


def is_async_callable(fn: object) -> bool:
    """Whether calling ``fn`` answers a coroutine or an async generator instead of running its code.

    ``asgiref.sync.async_to_sync(fn)`` is a plain callable (it runs ``fn`` to completion), so it passes."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if _is_async_function(fn):
        return True
    if not callable(fn) or inspect.isroutine(fn) or isinstance(fn, type):
        return False
    return _is_async_function(type(fn).__call__)  # an object whose __call__ is ``async def``


def refuse_async(fn: object, *, what: str, meta: Mapping[str, Any] | None = None) -> None:
    """Raise ``X_JOB_ASYNC_UNSUPPORTED`` when ``fn`` is async; ``what`` names the place (``"send_welcome:
    on_settled"``) and starts the message."""
    if not is_async_callable(fn):
        return
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    raise AsyncUnsupportedError(
        f"{what} is an async function ({name}); async job code is not supported yet and would never run. "
        "Write it as a plain def, or wrap it: asgiref.sync.async_to_sync(fn)",
        {**(meta or {}), "callable": name},
    )


def _is_async_function(fn: object) -> bool:
    return fn is not None and (iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn))
