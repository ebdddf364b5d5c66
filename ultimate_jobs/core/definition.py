"""``@job``: the declaration, its validation, the :class:`JobHandle`, and the descriptor.

Every declaration rule is checked here, when the module is imported, so a bad job fails
``manage.py check`` rather than its fourth attempt.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Literal, Required, TypedDict, TypeVar, Unpack

import pydantic

from ..defaults import DEFAULT_EVENT_POLL_MS
from ..drivers.records import Enqueued, EnqueueRequest
from ..errors import (
    IdempotencyRequiredError,
    InputNotJsonError,
    InvariantError,
    JobConcurrencyInvalidError,
    JobConcurrencyKeyInvalidError,
    JobDeclarationInvalidError,
    JobRateKeyInvalidError,
    JobRateLimitInvalidError,
    JobTenantMismatchError,
    JobTenantRequiredError,
    ValidationError,
)
from ..guards import admission
from ..guards.sealing import clear_model, model_may_hold_secret, refuse_reserved, seal_model, unseal
from ..guards.sync_only import is_coroutine_callable, refuse_async
from . import registry
from .durations import Duration
from .rates import RateLimit, parse_rate
from .retry import RetryPolicy, parse_optional_duration, retry_policy
from .run import JobRun
from .scope import Actor
from .tracing import current_traceparent

InputT = TypeVar("InputT")
ResultT = TypeVar("ResultT")

MAX_CONCURRENCY_KEY_LENGTH = 200
MAX_IDEMPOTENCY_KEY_LENGTH = 512
DEFAULT_QUEUE = "default"

WhenBusy = Literal["wait", "fail"]


_STRICT_JSON = json.JSONEncoder(allow_nan=False)
"""Whether a payload is JSON (NaN and Infinity are not): one encoder, not one built per call."""


@dataclass(frozen=True, slots=True)
class Concurrency:
    """A fleet-wide cap: ``limit`` runs at once, per ``key(input)`` when a key is given.

    >>> Concurrency(key=lambda i: i.account_id, limit=1, when_busy="fail")
    """

    limit: int = 1
    key: Callable[[Any], str] | None = None
    when_busy: WhenBusy = "wait"

    def as_dict(self) -> dict[str, Any]:
        """The descriptor shape (the key is code, so only whether there is one)."""
        return {"limit": self.limit, "keyed": self.key is not None, "when_busy": self.when_busy}


class JobOptions(TypedDict, total=False):
    """The keyword arguments of :func:`job`. ``idempotency_key`` and ``tenant`` are required."""

    idempotency_key: Required[Callable[[Any], str]]
    tenant: Required[Literal["none"] | Callable[[Any], str | None]]
    input: type[pydantic.BaseModel] | None
    retry: RetryPolicy | Mapping[str, Any] | None
    timeout: Duration | None
    step_timeout: Duration | None
    event_poll: Duration | None
    concurrency: int | Concurrency | None
    rate_limit: str | RateLimit | None
    rate_key: Callable[[Any], str] | None
    queue: str
    priority: int
    on_settled: Callable[[Any], Any] | None
    name: str | None


@dataclass(frozen=True, slots=True)
class JobDescriptor:
    """The manifest row for one job: what the CLI, admin and JSON views show."""

    kind: Literal["job"]
    name: str
    queue: str
    priority: int
    tenant: Literal["none", "input"]
    retry: Mapping[str, Any]
    timeout_ms: int | None
    step_timeout_ms: int | None
    event_poll_ms: int
    concurrency: Mapping[str, Any] | None
    rate_limit: Mapping[str, Any] | None
    input_schema: Mapping[str, Any] | None
    on_settled: bool
    origin: str

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``--json``)."""
        return {
            "kind": self.kind,
            "name": self.name,
            "queue": self.queue,
            "priority": self.priority,
            "tenant": self.tenant,
            "retry": dict(self.retry),
            "timeout_ms": self.timeout_ms,
            "step_timeout_ms": self.step_timeout_ms,
            "event_poll_ms": self.event_poll_ms,
            "concurrency": dict(self.concurrency) if self.concurrency else None,
            "rate_limit": dict(self.rate_limit) if self.rate_limit else None,
            "input_schema": self.input_schema,
            "on_settled": self.on_settled,
            "origin": self.origin,
        }


class JobHandle(Generic[InputT, ResultT]):
    """A declared job: enqueue it, describe it, or call its body by hand in a test.

    >>> charge.enqueue({"order_id": "o-1", "org_id": "org-1"})
    Enqueued(id='…', run_id='…', deduped=False)
    """

    kind = "job"

    def __init__(
        self,
        fn: Callable[[JobRun[InputT]], ResultT],
        *,
        name: str,
        explicit_name: bool,
        idempotency_key: Callable[[InputT], str],
        tenant: Literal["none"] | Callable[[InputT], str | None],
        input_model: type[pydantic.BaseModel] | None,
        retry: RetryPolicy,
        timeout_ms: int | None,
        step_timeout_ms: int | None,
        event_poll_ms: int,
        concurrency: Concurrency | None,
        queue: str,
        priority: int,
        on_settled: Callable[[Any], Any] | None,
        rate_limit: RateLimit | None = None,
        rate_key: Callable[[InputT], str] | None = None,
    ) -> None:
        self.fn = fn
        self.name = name
        self.explicit_name = explicit_name
        self.idempotency_key = idempotency_key
        self.tenant = tenant
        self.input_model = input_model
        self.retry = retry
        self.timeout_ms = timeout_ms
        self.step_timeout_ms = step_timeout_ms
        self.event_poll_ms = event_poll_ms
        self.concurrency = concurrency
        self.rate_limit = rate_limit
        self.rate_key = rate_key
        self.queue = queue
        self.priority = priority
        self.on_settled = on_settled
        self.seals = input_model is not None and model_may_hold_secret(input_model)
        """Whether an enqueue walks the input for secrets to seal: its model declares one, or may hold one
        (:func:`~ultimate_jobs.guards.sealing.model_may_hold_secret`) — decided here, once. Without it the
        row stores pydantic's JSON dump, checked in the one walk of
        :func:`~ultimate_jobs.guards.admission.clean_json`."""
        self.origin = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', name)}"
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self._is_async = is_coroutine_callable(fn)

    @property
    def is_async(self) -> bool:
        """Whether the body is ``async def``: it runs on an event loop (:func:`~ultimate_jobs.core.execute.
        execute_job_async`) — the worker's async lane, or ``run_jobs``'s — instead of a thread slot."""
        return self._is_async

    def __repr__(self) -> str:
        return f"<JobHandle {self.name} queue={self.queue}>"

    # -- input ---------------------------------------------------------------------------------

    def parse_input(self, value: Any) -> InputT:
        """Validate ``value`` against the declared model (``X_VALIDATION`` on failure)."""
        if self.input_model is None:
            if value is None:
                return {}  # type: ignore[return-value]
            if not isinstance(value, Mapping):
                raise ValidationError(
                    f"{self.name}: input must be a dict, got {type(value).__name__}", {"job": self.name}
                )
            return dict(value)  # type: ignore[return-value]
        if isinstance(value, self.input_model):
            value = clear_model(value)
        try:
            return self.input_model.model_validate(value if value is not None else {})  # type: ignore[return-value]
        except pydantic.ValidationError as exc:
            raise ValidationError(
                f"{self.name}: input does not match {self.input_model.__name__}: {exc.errors(include_url=False)}",
                {"job": self.name, "errors": json.loads(exc.json(include_url=False))},
            ) from exc

    def parse_stored(self, payload: Any) -> InputT:
        """The input of a stored row: its sealed secrets opened (``X_JOB_SECRET_UNREADABLE`` when none
        of this site's keys opens one), then validated as :meth:`parse_input` does."""
        return self.parse_input(unseal(payload, what=f"{self.name}: the input"))

    def dump_input(self, parsed: InputT) -> dict[str, Any]:
        """The JSON payload stored on the row. NaN and Infinity are refused: they are not JSON, and a
        Postgres ``jsonb`` column rejects what the memory driver would have kept. Secret fields
        (``SecretStr``…) are stored sealed — an envelope only the site's keys open, never in clear
        (:mod:`ultimate_jobs.guards.sealing`) — and read as a mask on every operator surface."""
        if isinstance(parsed, pydantic.BaseModel):
            return self._json_payload(seal_model(parsed, what=f"{self.name}: the input"))
        payload = dict(parsed)  # type: ignore[call-overload]
        refuse_reserved(payload, f"{self.name}: the input")
        return self._json_payload(payload)

    def _json_payload(self, payload: dict[str, Any]) -> dict[str, Any]:
        try:
            _STRICT_JSON.encode(payload)
        except (TypeError, ValueError) as exc:
            raise InputNotJsonError(f"{self.name}: input is not JSON-serialisable: {exc}", {"job": self.name}) from exc
        return payload

    def derive_tenant(self, parsed: InputT) -> str | None:
        """The org the declaration names for this input (``None`` for ``tenant="none"``)."""
        if self.tenant == "none":
            return None
        org = self.tenant(parsed)
        if not isinstance(org, str) or not org:
            raise JobTenantMismatchError(
                f"{self.name}: tenant(input) answered {org!r}; it must name the org as a non-empty string",
                {"job": self.name},
            )
        return org

    def derive_concurrency_key(self, parsed: InputT) -> str | None:
        """``concurrency.key(input)``, validated: a non-empty string of at most 200 characters."""
        if self.concurrency is None or self.concurrency.key is None:
            return None
        key = self.concurrency.key(parsed)
        if not isinstance(key, str) or not key or len(key) > MAX_CONCURRENCY_KEY_LENGTH:
            raise JobConcurrencyKeyInvalidError(
                f"{self.name}: concurrency.key(input) answered {str(key)[:40]!r}; it must be a non-empty string of "
                f"at most {MAX_CONCURRENCY_KEY_LENGTH} characters — an id, never a payload",
                {"job": self.name},
            )
        return key

    def derive_rate_key(self, parsed: InputT) -> str | None:
        """The key the run's starts are counted under in its rate limit: ``rate_limit``'s own with no
        ``rate_key``, else per ``rate_key(input)`` — which must answer a non-empty string of at most 200
        characters (``X_JOB_RATE_KEY_INVALID`` otherwise, or when it raises). ``None`` with no rate limit."""
        if self.rate_limit is None:
            return None
        if self.rate_key is None:
            return self.rate_limit.key_for(None)
        try:
            key = self.rate_key(parsed)
        except Exception as exc:
            raise JobRateKeyInvalidError(
                f"{self.name}: rate_key(input) raised {type(exc).__name__}: {str(exc)[:200]}; it must answer the "
                "key the limit counts starts under (an org or account id) for every input",
                {"job": self.name},
            ) from exc
        if not isinstance(key, str) or not key or len(key) > MAX_CONCURRENCY_KEY_LENGTH:
            raise JobRateKeyInvalidError(
                f"{self.name}: rate_key(input) answered {str(key)[:40]!r}; it must be a non-empty string of at most "
                f"{MAX_CONCURRENCY_KEY_LENGTH} characters — an id, never a payload",
                {"job": self.name},
            )
        return self.rate_limit.key_for(key)

    # -- the surface ---------------------------------------------------------------------------

    def build_request(
        self,
        input: Any = None,
        *,
        run_id: str | None = None,
        queue: str | None = None,
        delay: Duration | None = None,
        run_at: datetime | int | None = None,
        on_conflict: Literal["dedupe", "error"] = "dedupe",
        actor: Actor | None = None,
        id: str | None = None,
        now_ms: int | None = None,
    ) -> EnqueueRequest:
        """The row an enqueue would write, with every per-call rule checked; nothing is written.

        What the declaration decides is decided once (:attr:`seals`; no concurrency key, rate key or tenant
        to derive when none is declared); per call, plain JSON input is checked in one walk
        (:func:`~ultimate_jobs.guards.admission.clean_json`), and any other runs every check in full."""
        plain = type(input) is dict and admission.clean_json(input)
        if not plain:
            admission.check_input(input, job=self.name)  # before parsing: a 10,000-deep dict is refused, not recursed
        parsed = self.parse_input(input)
        payload, checked = self._payload(parsed, plain)
        key = self.idempotency_key(parsed)
        if not isinstance(key, str) or not key or len(key) > MAX_IDEMPOTENCY_KEY_LENGTH:
            raise JobDeclarationInvalidError(
                f"{self.name}: idempotency_key(input) answered {str(key)[:40]!r}; it must be a non-empty string "
                f"of at most {MAX_IDEMPOTENCY_KEY_LENGTH} characters",
                {"job": self.name},
            )
        tenant_id = self.derive_tenant(parsed)
        if actor is not None and actor.org_id is not None:
            if tenant_id is not None and tenant_id != actor.org_id:
                # never name the input's org: the refusal must not echo which other org a caller tried
                raise JobTenantMismatchError(
                    f"{self.name}: the input's org differs from the org the actor acts under ({actor.org_id}); "
                    "enqueue_as stamps the actor's org on the row, so pass an input of that org",
                    {"job": self.name, "actor_org": actor.org_id},
                )
            tenant_id = actor.org_id
        if on_conflict not in ("dedupe", "error"):
            raise InvariantError(f"on_conflict must be 'dedupe' or 'error', got {on_conflict!r}", {})
        run_at_ms = (
            None
            if delay is None and run_at is None
            else admission.scheduled_ms(
                delay, run_at, now=(lambda: now_ms) if now_ms is not None else _now_ms, job=self.name
            )
        )
        if self.rate_key is not None:
            self.derive_rate_key(parsed)  # a rate_key that raises or answers no key is refused here, not at its run
        return EnqueueRequest(
            name=self.name,
            queue=self.queue if queue is None else queue,
            input=payload,
            idempotency_key=key,
            tenant_id=tenant_id,
            max_attempts=self.retry.attempts,
            priority=self.priority,
            run_at_ms=run_at_ms,
            id=id,
            run_id=run_id,
            on_conflict=on_conflict,
            enqueued_by=actor.id if actor is not None else None,
            traceparent=current_traceparent(),
            concurrency_key=None if self.concurrency is None else self.derive_concurrency_key(parsed),
            input_checked=checked,
        )

    def _payload(self, parsed: Any, plain: bool) -> tuple[dict[str, Any], bool]:
        """The stored payload of ``parsed``, and whether it was checked already (``check_request`` then does
        not walk it again): a plain dict input is copied as it is; a model without secrets is pydantic's JSON
        dump, checked in one walk; anything else — secrets to seal, or a dump the walk does not prove plain —
        takes :meth:`dump_input`, every check in full."""
        if self.input_model is None:
            return (dict(parsed), True) if plain else (self.dump_input(parsed), False)
        if not self.seals:
            dumped = parsed.model_dump(mode="json")
            if admission.clean_json(dumped):
                return dumped, True
        return self.dump_input(parsed), False

    def enqueue(
        self,
        input: Any = None,
        *,
        run_id: str | None = None,
        queue: str | None = None,
        delay: Duration | None = None,
        run_at: datetime | int | None = None,
        on_conflict: Literal["dedupe", "error"] = "dedupe",
    ) -> Enqueued:
        """Queue one run. Joins the caller's transaction when the outbox is installed; answers the job's
        own ids on every path, and ``deduped=True`` when a live job already holds the idempotency key."""
        from .routing import jobs_router

        request = self.build_request(
            input, run_id=run_id, queue=queue, delay=delay, run_at=run_at, on_conflict=on_conflict
        )
        return jobs_router().enqueue(request)

    async def aenqueue(
        self,
        input: Any = None,
        *,
        run_id: str | None = None,
        queue: str | None = None,
        delay: Duration | None = None,
        run_at: datetime | int | None = None,
        on_conflict: Literal["dedupe", "error"] = "dedupe",
    ) -> Enqueued:
        """:meth:`enqueue` from async code: the same row, answer and errors, without blocking the event loop.

        >>> queued = await charge.aenqueue({"order_id": "o-1", "org_id": "org-1"})

        On the Postgres driver the row is written from the event loop, on a connection of the loop's own
        (no thread hop), and commits at once — async code holds no transaction, Django's being synchronous.
        Async code entered from sync code with ``async_to_sync`` is the exception: its enqueue runs on that
        sync thread (``sync_to_async(thread_sensitive=True)``), so a sync function that opens
        ``transaction.atomic()`` and calls async code that awaits ``aenqueue`` stages the row in that
        transaction, as :meth:`enqueue` would (a rollback leaves no job). Other drivers always take that
        thread. The run's org and the tenant guard follow either way (context variables are copied).
        """
        from .routing import aenqueue_many, jobs_router

        request = self.build_request(
            input, run_id=run_id, queue=queue, delay=delay, run_at=run_at, on_conflict=on_conflict
        )
        return (await aenqueue_many(jobs_router(), [request]))[0]

    def enqueue_many(
        self,
        inputs: Iterable[Any],
        *,
        queue: str | None = None,
        delay: Duration | None = None,
        run_at: datetime | int | None = None,
        on_conflict: Literal["dedupe", "error"] = "dedupe",
    ) -> list[Enqueued]:
        """Queue one run per input, all or nothing, in one round trip; answers one :class:`Enqueued` per
        input, in order. Every input is checked before anything is written (the first bad one raises what
        :meth:`enqueue` would); the options apply to every row. Joins the caller's transaction as
        :meth:`enqueue` does.

        >>> charge.enqueue_many([{"order_id": o.pk, "org_id": o.org_id} for o in orders])
        """
        from .routing import jobs_router

        now_ms = _now_ms() if delay is not None else None  # one instant: every delayed row is due together
        requests = [
            self.build_request(value, queue=queue, delay=delay, run_at=run_at, on_conflict=on_conflict, now_ms=now_ms)
            for value in self._many(inputs)
        ]
        return jobs_router().enqueue_many(requests) if requests else []

    async def aenqueue_many(
        self,
        inputs: Iterable[Any],
        *,
        queue: str | None = None,
        delay: Duration | None = None,
        run_at: datetime | int | None = None,
        on_conflict: Literal["dedupe", "error"] = "dedupe",
    ) -> list[Enqueued]:
        """:meth:`enqueue_many` from async code, run as :meth:`aenqueue` runs (on Django's thread-sensitive
        thread, in the caller's transaction when sync code holding one called in), all or nothing.

        >>> queued = await charge.aenqueue_many([{"order_id": "o-1", "org_id": "org-1"}, ...])
        """
        from .routing import aenqueue_many, jobs_router

        now_ms = _now_ms() if delay is not None else None  # one instant: every delayed row is due together
        requests = [
            self.build_request(value, queue=queue, delay=delay, run_at=run_at, on_conflict=on_conflict, now_ms=now_ms)
            for value in self._many(inputs)
        ]
        return await aenqueue_many(jobs_router(), requests) if requests else []

    def _many(self, inputs: Iterable[Any]) -> list[Any]:
        """``inputs`` as a list; one input passed where many are expected (a dict iterates its keys) is
        ``X_VALIDATION``."""
        if isinstance(inputs, Mapping | str | bytes | pydantic.BaseModel) or not isinstance(inputs, Iterable):
            raise ValidationError(
                f"{self.name}: enqueue_many takes a list of inputs, got one {type(inputs).__name__}; pass "
                "[input, ...], or call enqueue(input) for one run",
                {"job": self.name},
            )
        return list(inputs)

    def enqueue_as(self, actor: Actor, input: Any = None, **options: Any) -> Enqueued:
        """Enqueue on behalf of ``actor``: the row's tenant comes from ``actor.org_id`` (so per-tenant
        limits apply) and ``enqueued_by`` records ``actor.id`` — attribution, never authority."""
        from .routing import jobs_router

        return jobs_router().enqueue(self.build_request(input, actor=actor, **options))

    def run(self, job_run: JobRun[InputT]) -> ResultT:
        """Call the body by hand (a test; an async body answers its coroutine); the worker never does this
        outside :func:`execute_job` / :func:`execute_job_async`."""
        return self.fn(job_run)

    def describe(self) -> JobDescriptor:
        """The manifest row for this job."""
        return JobDescriptor(
            kind="job",
            name=self.name,
            queue=self.queue,
            priority=self.priority,
            tenant="none" if self.tenant == "none" else "input",
            retry=self.retry.as_dict(),
            timeout_ms=self.timeout_ms,
            step_timeout_ms=self.step_timeout_ms,
            event_poll_ms=self.event_poll_ms,
            concurrency=self.concurrency.as_dict() if self.concurrency else None,
            rate_limit=self.rate_limit.as_dict() if self.rate_limit else None,
            input_schema=self.input_model.model_json_schema() if self.input_model else None,
            on_settled=self.on_settled is not None,
            origin=self.origin,
        )


def _now_ms() -> int:
    from .installed import job_clock

    return job_clock().now_ms()


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
