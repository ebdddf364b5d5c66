"""Telling a job how its run ended: ``on_settled`` (up to 3 tries, under the job's tenant, its errors
scrubbed of the input's secrets), and the same for rows a claim buried after their final attempt's
lease lapsed (:func:`announce_exhausted`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

from ..contracts.jobs import LEASE_LAPSED_FINAL_ATTEMPT, ExhaustedJob
from ..errors import JobOnSettledFailedError, UltimateError
from ..guards.redaction import scrub, secret_values
from ..guards.sync_only import call_to_completion, is_coroutine_callable
from . import registry
from .definition import JobHandle
from .logs import log_event
from .outcomes import Settled
from .scope import Actor, acting_as

ON_SETTLED_ATTEMPTS = 3


def run_on_settled(
    handle: JobHandle[Any, Any],
    settled: Settled,
    tenant_id: str | None,
    *,
    scrub_text: Callable[[str], str] = lambda text: text,
) -> UltimateError | None:
    """Tell ``handle.on_settled`` how the run ended: up to 3 tries back to back, under the job's tenant.
    A hook that keeps throwing is logged ``jobs.on-settled.failed`` and answered, never raised; its
    error text passes ``scrub_text`` first (the job's secrets masked — a hook may quote its input).
    An ``async def`` hook runs to completion here (``asgiref.sync.async_to_sync``); an async attempt
    awaits it on its loop instead (:func:`arun_on_settled`)."""
    hook = handle.on_settled
    if hook is None:
        return None
    call = partial(call_to_completion, hook) if is_coroutine_callable(hook) else hook
    last: Exception | None = None
    for _ in range(ON_SETTLED_ATTEMPTS):
        try:
            with acting_as(Actor(org_id=tenant_id)):
                call(settled)
            return None
        except Exception as exc:
            last = exc
    return _hook_failed(handle, settled, last, scrub_text)


async def arun_on_settled(
    handle: JobHandle[Any, Any],
    settled: Settled,
    tenant_id: str | None,
    *,
    offload: Callable[..., Awaitable[Any]],
    scrub_text: Callable[[str], str] = lambda text: text,
) -> UltimateError | None:
    """:func:`run_on_settled` from an async attempt: an ``async def`` hook is awaited on the attempt's loop,
    a plain one runs through ``offload`` (off the loop: it may use the ORM)."""
    hook = handle.on_settled
    if hook is None:
        return None
    if not is_coroutine_callable(hook):
        return await offload(partial(run_on_settled, scrub_text=scrub_text), handle, settled, tenant_id)  # type: ignore[no-any-return]
    last: Exception | None = None
    for _ in range(ON_SETTLED_ATTEMPTS):
        try:
            with acting_as(Actor(org_id=tenant_id)):
                await hook(settled)
            return None
        except Exception as exc:
            last = exc
    return _hook_failed(handle, settled, last, scrub_text)


def _hook_failed(
    handle: JobHandle[Any, Any], settled: Settled, last: Exception | None, scrub_text: Callable[[str], str]
) -> UltimateError:
    error = JobOnSettledFailedError(
        scrub_text(f"{handle.name}: on_settled threw on all {ON_SETTLED_ATTEMPTS} tries: {last!r}"),
        {"job": handle.name, "job_id": settled.job_id, "outcome": settled.outcome},
    )
    log_event(
        logging.ERROR,
        "jobs.on-settled.failed",
        job_id=settled.job_id,
        name=handle.name,
        outcome=settled.outcome,
        code=error.code,
        error=scrub_text(repr(last)),
    )
    return error


def _scrub_text(secrets: set[str], text: str) -> str:
    return str(scrub(text, secrets))


def announce_exhausted(rows: Sequence[ExhaustedJob], *, context: Callable[[], Any] | None = None) -> None:
    """What a claim round does with rows its claim buried: ``jobs.claim.exhausted`` at error, and the
    job's ``on_settled`` (dead-lettered, or dropped for ``dead_letter=False``), ``code=None``."""
    for row in rows:
        log_event(
            logging.ERROR,
            "jobs.claim.exhausted",
            job_id=row.id,
            name=row.name,
            queue=row.queue,
            attempt=row.attempt,
            state=row.state,
            error=LEASE_LAPSED_FINAL_ATTEMPT,
        )
        handle = registry.lookup(row.name)
        if not isinstance(handle, JobHandle):
            continue
        try:
            parsed = handle.parse_stored(row.input)
        except UltimateError:
            parsed = None
        settled = Settled(
            outcome="dead-lettered" if row.state == "dead" else "dropped",
            job_id=row.id,
            run_id=row.run_id,
            name=row.name,
            attempt=row.attempt,
            input=parsed,
            error=LEASE_LAPSED_FINAL_ATTEMPT,
            code=None,
            ctx=context() if context is not None else None,
            tenant_id=row.tenant_id,
        )
        secrets = secret_values(row.input)
        run_on_settled(
            handle,
            settled,
            row.tenant_id if handle.tenant != "none" else None,
            scrub_text=partial(_scrub_text, secrets),
        )


def drop_exhausted_names() -> frozenset[str]:
    """The registered jobs declaring ``retry dead_letter=False`` — the claim buries their rows failed."""
    return frozenset(h.name for h in registry.registered("job") if isinstance(h, JobHandle) and not h.retry.dead_letter)
