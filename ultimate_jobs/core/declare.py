"""``@job``: the declaration and its validation. Every declaration rule is checked here, when the module
that declares the job is imported, so a bad job fails ``manage.py check`` rather than its fourth attempt;
what it builds is a :class:`~ultimate_jobs.core.definition.JobHandle`."""

import inspect
import math
from collections.abc import Callable
from typing import Any, TypeVar, Unpack

import pydantic

from ..defaults import DEFAULT_EVENT_POLL_MS
from ..errors import (
    IdempotencyRequiredError,
    JobConcurrencyInvalidError,
    JobDeclarationInvalidError,
    JobRateLimitInvalidError,
    JobTenantRequiredError,
)
from ..guards.sync_only import refuse_async
from . import registry
from .definition import (
    DEFAULT_QUEUE,
    Concurrency,
    JobHandle,
    JobOptions,
)
from .rates import RateLimit, parse_rate
from .retry import parse_optional_duration, retry_policy
from .run import JobRun

ResultT = TypeVar("ResultT")


def _validate_concurrency(value: object, job: str) -> Concurrency | None:
    if value is None:
        return None

    def bad(why: str) -> JobConcurrencyInvalidError:
        return JobConcurrencyInvalidError(f"{job}: concurrency {why}", {"job": job, "field": "concurrency"})

    def check_limit(limit: object) -> int:
        if isinstance(limit, bool) or not isinstance(limit, int | float):
            raise bad(f"limit must be a whole number >= 1, got {limit!r}")
        if not math.isfinite(limit) or limit != int(limit) or limit < 1:
            raise bad(f"limit must be a whole number >= 1, got {limit!r}")
        return int(limit)

    if isinstance(value, Concurrency):
        if value.key is not None and not callable(value.key):
            raise bad("key must be a function of the input")
        if value.when_busy not in ("wait", "fail"):
            raise bad(f"when_busy must be 'wait' or 'fail', got {value.when_busy!r}")
        return Concurrency(limit=check_limit(value.limit), key=value.key, when_busy=value.when_busy)
    return Concurrency(limit=check_limit(value))


def _validate_rate_limit(value: object, key: object, job: str) -> RateLimit | None:
    """``rate_limit=``: a rate string (the job's own limit) or a shared :class:`RateLimit`; ``rate_key=`` a
    function of the input, only beside a rate limit. Anything else is ``X_JOB_RATE_LIMIT_INVALID``."""
    if key is not None and not callable(key):
        raise JobRateLimitInvalidError(f"{job}: rate_key must be a function of the input", {"job": job})
    if value is None:
        if key is not None:
            raise JobRateLimitInvalidError(
                f"{job}: rate_key counts starts under a rate limit; give rate_limit= too, e.g. rate_limit='10/s'",
                {"job": job},
            )
        return None
    if isinstance(value, RateLimit):
        return value
    if isinstance(value, str):
        parse_rate(value, field=f"{job}: rate_limit")  # refused naming the job, before the limit's own name
        return RateLimit(f"job:{job}", value)
    raise JobRateLimitInvalidError(
        f"{job}: rate_limit must be a rate such as '10/s' or a RateLimit shared by several jobs, got {value!r}",
        {"job": job},
    )


_anonymous = 0


def job(**options: Unpack[JobOptions]) -> Callable[[Callable[[JobRun[Any]], ResultT]], JobHandle[Any, ResultT]]:
    """Declare a job over ``def body(run: JobRun)``. ``idempotency_key`` and ``tenant`` are required.

    >>> class Onboard(pydantic.BaseModel):
    ...     org_id: str
    >>> @job(input=Onboard, idempotency_key=lambda i: f"onboard:{i.org_id}", tenant=lambda i: i.org_id,
    ...      retry={"attempts": 5, "backoff": "exponential"})
    ... def onboard_org(run: JobRun[Onboard]) -> None:
    ...     org = run.step.run("provision", lambda: provision(run.input.org_id))
    ...     run.step.sleep("3d")
    ...     run.step.run("nudge", lambda: nudge(org))

    The job's name is the function's ``__name__`` unless ``name=`` is given; it is the durable queue
    key, so renaming the function with ``name=`` kept never moves where rows are delivered.
    """
    known = set(JobOptions.__annotations__)
    unknown = set(options) - known
    if unknown:
        raise JobDeclarationInvalidError(
            f"job(): unknown options {sorted(unknown)}; known: {sorted(known)}", {"field": sorted(unknown)[0]}
        )

    def declare(fn: Callable[[JobRun[Any]], ResultT]) -> JobHandle[Any, ResultT]:
        global _anonymous
        if not callable(fn):
            raise JobDeclarationInvalidError("job(): decorate a function that takes one JobRun argument", {})
        explicit = options.get("name")
        if explicit is not None and (not isinstance(explicit, str) or not explicit.strip()):
            raise JobDeclarationInvalidError(
                f"job(): name must be a non-empty string, got {explicit!r}", {"field": "name"}
            )
        derived = getattr(fn, "__name__", None)
        if derived == "<lambda>" or not derived:
            _anonymous += 1
            derived = f"anonymous-job-{_anonymous}"
        name = explicit or derived
        handle = _build(fn, name, explicit is not None, options)
        registry.register(handle)
        return handle

    return declare


def _build(fn: Callable[[JobRun[Any]], Any], name: str, explicit: bool, options: JobOptions) -> JobHandle[Any, Any]:
    def bad(field: str, why: str) -> JobDeclarationInvalidError:
        return JobDeclarationInvalidError(f"{name}: {field} {why}", {"job": name, "field": field})

    refuse_async(fn, what=f"{name}: the job body", meta={"job": name, "field": "body"}, allow_coroutines=True)
    concurrency = options.get("concurrency")
    for field in ("idempotency_key", "tenant", "on_settled"):
        allow = field == "on_settled"  # awaited (core/settled.py); the key functions run at enqueue, sync
        meta = {"job": name, "field": field}
        refuse_async(options.get(field), what=f"{name}: {field}", meta=meta, allow_coroutines=allow)
    if isinstance(concurrency, Concurrency):
        refuse_async(concurrency.key, what=f"{name}: concurrency.key", meta={"job": name, "field": "concurrency"})
    refuse_async(options.get("rate_key"), what=f"{name}: rate_key", meta={"job": name, "field": "rate_key"})
    if "idempotency_key" not in options or options.get("idempotency_key") is None:
        raise IdempotencyRequiredError(
            f"{name}: idempotency_key is required — queues deliver at least once, so every job must say how "
            "to recognise a repeat: idempotency_key=lambda i: f'charge:{i.order_id}'",
            {"job": name},
        )
    if not callable(options["idempotency_key"]):
        raise bad("idempotency_key", "must be a function of the input")
    if "tenant" not in options or options.get("tenant") is None:
        raise JobTenantRequiredError(
            f"{name}: tenant is required — tenant=lambda i: i.org_id for work under one org, or tenant='none'",
            {"job": name},
        )
    tenant = options["tenant"]
    if tenant != "none" and not callable(tenant):
        raise bad("tenant", f"must be 'none' or a function of the input, got {tenant!r}")
    input_model = options.get("input")
    if input_model is not None and not (isinstance(input_model, type) and issubclass(input_model, pydantic.BaseModel)):
        raise bad("input", "must be a pydantic BaseModel subclass")
    queue = options.get("queue", DEFAULT_QUEUE)
    if not isinstance(queue, str) or not queue.strip():
        raise bad("queue", f"must be a non-empty string, got {queue!r}")
    priority = options.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise bad("priority", f"must be an int, got {priority!r}")
    on_settled = options.get("on_settled")
    if on_settled is not None and not callable(on_settled):
        raise bad("on_settled", "must be a function of the Settled record")
    try:
        parameters = len(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # no signature to read (async_to_sync's wrapper): the call will tell
        parameters = 1
    if parameters != 1:
        raise bad("body", "must take exactly one argument, the JobRun")
    event_poll = parse_optional_duration(options.get("event_poll"), field="event_poll", job=name)
    return JobHandle(
        fn,
        name=name,
        explicit_name=explicit,
        idempotency_key=options["idempotency_key"],
        tenant=tenant,
        input_model=input_model,
        retry=retry_policy(options.get("retry"), job=name),
        timeout_ms=parse_optional_duration(options.get("timeout"), field="timeout", job=name),
        step_timeout_ms=parse_optional_duration(options.get("step_timeout"), field="step_timeout", job=name),
        event_poll_ms=event_poll if event_poll is not None else DEFAULT_EVENT_POLL_MS,
        concurrency=_validate_concurrency(concurrency, name),
        queue=queue,
        priority=priority,
        on_settled=on_settled,
        rate_limit=_validate_rate_limit(options.get("rate_limit"), options.get("rate_key"), name),
        rate_key=options.get("rate_key"),
    )
