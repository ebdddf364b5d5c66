"""Where job code must be synchronous, one check refuses an ``async def`` at the moment it is handed over.

A job body, a ``step.run`` function and ``on_settled`` may be ``async def`` (the core awaits them:
:func:`is_coroutine_callable`). Elsewhere — ``idempotency_key``, ``tenant``, ``concurrency.key``, the
context factory, ``cross_tenant``'s function, a signal's callback — the callable is called where no event
loop awaits it: an async function would answer a coroutine object instead of running its code. So there a
coroutine function, an async generator function, an object whose ``__call__`` is one, and a
``functools.partial`` of any of these are refused with ``X_JOB_ASYNC_UNSUPPORTED`` — and an async
generator function is refused everywhere (nothing iterates it).

>>> refuse_async(derive_org, what="send_welcome: tenant")   # silent for a plain def
>>> refuse_async(send_welcome, what="send_welcome: the job body", allow_coroutines=True)
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from asgiref.sync import async_to_sync, iscoroutinefunction

from ..errors import AsyncUnsupportedError

T = TypeVar("T")


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


def is_coroutine_callable(fn: object) -> bool:
    """Whether calling ``fn`` answers a coroutine (an ``async def``, a partial of one, an object whose
    ``__call__`` is one) — what the core awaits where async job code is allowed."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if fn is None:
        return False
    if iscoroutinefunction(fn):
        return True
    if not callable(fn) or inspect.isroutine(fn) or isinstance(fn, type):
        return False
    return iscoroutinefunction(type(fn).__call__)


def refuse_async(
    fn: object, *, what: str, meta: Mapping[str, Any] | None = None, allow_coroutines: bool = False
) -> None:
    """Raise ``X_JOB_ASYNC_UNSUPPORTED`` when ``fn`` is async (with ``allow_coroutines``, only when it is an
    async generator function, which nothing iterates); ``what`` names the place (``"send_welcome:
    tenant"``) and starts the message."""
    if not is_async_callable(fn) or (allow_coroutines and is_coroutine_callable(fn)):
        return
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    why = (
        "an async generator is never iterated here, so its code would never run. Write an async def that returns"
        if allow_coroutines
        else "it is called where no event loop awaits it, so its code would never run. Write it as a plain def"
    )
    raise AsyncUnsupportedError(
        f"{what} is an async function ({name}); {why}, or wrap it: asgiref.sync.async_to_sync(fn)",
        {**(meta or {}), "callable": name},
    )


def call_to_completion(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Call the coroutine callable ``fn(*args)`` from sync code and answer its result (through asgiref's
    ``async_to_sync``, which is told a plain ``async def`` so every coroutine shape passes)."""
    return async_to_sync(_awaited)(fn, *args)  # type: ignore[no-any-return]


async def _awaited(fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    return await fn(*args)


def _is_async_function(fn: object) -> bool:
    return fn is not None and (iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn))
