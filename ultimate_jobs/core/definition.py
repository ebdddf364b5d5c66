"""A declared job: the :class:`JobHandle` ``@job`` answers (enqueue, describe, the input's rules), its
:class:`JobDescriptor`, and :class:`Concurrency`. The declaration and its validation are
:mod:`.declare`'s."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Literal, Required, TypedDict, TypeVar

import pydantic

from ..contracts.jobs import Enqueued, EnqueueRequest
from ..errors import (
    InputNotJsonError,
    InvariantError,
    JobConcurrencyKeyInvalidError,
    JobDeclarationInvalidError,
    JobRateKeyInvalidError,
    JobTenantMismatchError,
    ValidationError,
)
from ..guards import admission
from ..guards.sealing import clear_model, model_may_hold_secret, refuse_reserved, seal_model, unseal
from ..guards.sync_only import is_coroutine_callable
from .durations import Duration
from .rates import RateLimit
from .retry import RetryPolicy
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
