"""Durable steps: ``step.run`` runs once ever, ``step.sleep`` and ``step.wait_for_event`` suspend.

Step names are the replay key, so they must be deterministic and unique in a run (a duplicate is
``X_STEP_DUPLICATE``). A completed step's output is persisted before the next step starts, and an
attempt that replays reads it back without calling the function. Suspension is control flow
(:class:`StepSuspension`), never a failure: it burns no attempt.

An output that holds a secret is stored sealed (:mod:`ultimate_jobs.guards.sealing`) and opened on replay: a
``SecretStr``, ``SecretBytes`` or ``Secret`` object where it stands (it comes back as that object), and
any string or number that quotes a secret of the job's input, in any rendering
(:func:`~ultimate_jobs.guards.redaction.renderings`) — the whole output when its JSON still quotes one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from collections.abc import Awaitable, Callable, Generator, Iterator, Mapping
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import transaction

from ..contracts.events import EventBus
from ..contracts.jobs import ClaimRef, StepRecord
from ..defaults import DEFAULT_EVENT_POLL_MS
from ..errors import (
    InvariantError,
    JobAbortedError,
    JobTimeoutError,
    LeaseLostError,
    StepAtomicUnsupportedError,
    StepDuplicateError,
    UltimateError,
)
from ..guards.admission import check_json, check_text
from ..guards.redaction import renderings
from ..guards.sealing import is_envelope, refuse_reserved, seal, seal_object, unseal
from ..guards.sync_only import call_to_completion, is_coroutine_callable, refuse_async
from .clock import Clock
from .durations import Duration, format_duration, parse_duration
from .signals import CancelSignal, cancel_on_abort, signal_scope

logger = logging.getLogger("ultimate_jobs")

T = TypeVar("T")


class StepSuspension(BaseException):
    """Raised by a sleep or a wait to hand the run back until ``resume_at_ms``.

    It derives from ``BaseException`` so a body's ``except Exception`` cannot swallow it.
    """

    def __init__(self, step: str, resume_at_ms: int, reason: str) -> None:
        super().__init__(f"{reason} {step!r} until {resume_at_ms}")
        self.step = step
        self.resume_at_ms = resume_at_ms
        self.reason = reason


SaveStep = Callable[[StepRecord], bool]


class StepTransactions:
    """What ``run.step.atomic`` needs of the run's driver: the Django alias its jobs live in (``None`` when
    they live elsewhere), its name for messages, and the save that runs inside the caller's transaction
    and holds the job's row until it ends (``driver.save_step_held``)."""

    __slots__ = ("alias", "driver", "save_held")

    def __init__(self, alias: str | None, driver: str, save_held: SaveStep) -> None:
        self.alias, self.driver, self.save_held = alias, driver, save_held


class Step:
    """The step runner a body reaches as ``run.step``."""

    def __init__(
        self,
        *,
        job_id: str,
        ref: ClaimRef,
        completed: tuple[StepRecord, ...],
        save: SaveStep,
        signal: CancelSignal,
        clock: Clock,
        bus: Callable[[], EventBus],
        step_timeout_ms: int | None = None,
        event_poll_ms: int = DEFAULT_EVENT_POLL_MS,
        secrets: frozenset[str] | Callable[[], frozenset[str]] = frozenset(),
        transactions: StepTransactions | None = None,
    ) -> None:
        self._job_id = job_id
        self._transactions = transactions
        self._ref = ref
        self._records: dict[str, StepRecord] = {r.name: r for r in completed}
        self._next_seq = max((r.seq for r in completed), default=0) + 1
        self._save = save
        self._signal = signal
        self._clock = clock
        self._bus = bus
        self._step_timeout_ms = step_timeout_ms
        self._event_poll_ms = event_poll_ms
        self._seen: set[str] = set()
        self._secrets = secrets  # or how to read them: the input is walked only when a step's result is stored

    @functools.cached_property
    def _quotes(self) -> list[str]:
        secrets = self._secrets() if callable(self._secrets) else self._secrets
        return sorted({form for secret in secrets for form in renderings(secret)}, key=len, reverse=True)

    # -- bookkeeping ---------------------------------------------------------------------------

    def _enter(self, name: str) -> StepRecord | None:
        if not isinstance(name, str) or not name:
            raise InvariantError("a step name must be a non-empty string", {"job_id": self._job_id})
        check_text(name, field="a step name", refuse=_invariant(name.replace("\x00", "\\x00")))
        if name in self._seen:
            raise StepDuplicateError(
                f"step {name!r} ran twice in one run; step names are the replay key — make each one unique "
                f"(e.g. f'enqueue:{{row.id}}')",
                {"step": name, "job_id": self._job_id},
            )
        self._seen.add(name)
        self._refuse_if_aborted(name)
        return self._records.get(name)

    def _refuse_if_aborted(self, name: str) -> None:
        reason = self._signal.reason
        if reason is not None:
            raise JobAbortedError(
                f"step {name!r} refused: the attempt was cancelled ({reason.code}); every step write after the "
                "cancel is refused — return from the body",
                {"step": name, "reason": reason.code, "job_id": self._job_id},
            )

    def _persist(self, record: StepRecord) -> Flow[None]:
        self._refuse_if_aborted(record.name)
        saved = yield functools.partial(self._save, record)
        if not saved:
            raise LeaseLostError(
                f"step {record.name!r} was not saved: this worker no longer holds the job's claim",
                {"step": record.name, "job_id": self._job_id},
            )
        self._records[record.name] = record

    def _record(self, name: str, status: Any, *, started_at_ms: int | None = None, **fields: Any) -> StepRecord:
        existing = self._records.get(name)
        seq = existing.seq if existing else self._next_seq
        if existing is None:
            self._next_seq += 1
        if existing is not None:
            started = existing.started_at_ms
        else:
            started = started_at_ms if started_at_ms is not None else self._clock.now_ms()
        return StepRecord(name=name, seq=seq, status=status, started_at_ms=started, **fields)

    @property
    def completed(self) -> dict[str, StepRecord]:
        """The steps known to this attempt, by name (replayed and new)."""
        return dict(self._records)

    # -- the flows: what a step does, told as the sync calls it needs -----------------------------
    #
    # Each step is written once, as a generator that yields each call it needs — a thunk that talks to the
    # driver or the event bus, or a _CallFn for the user's function — and is sent the answer back.
    # Step runs the calls in line; AsyncStep awaits them (the thunks on the lane's offload threads).

    def _drive(self, flow: Flow[T]) -> T:
        finished, value = _advance(flow)
        while not finished:
            try:
                if isinstance(value, _CallFn):
                    answer = self._call_fn(value)
                elif isinstance(value, _InTransaction):
                    answer = self._in_transaction(value)
                else:
                    answer = value()
            except BaseException as exc:
                finished, value = _advance(flow, error=exc)
            else:
                finished, value = _advance(flow, answer)
        return value  # type: ignore[no-any-return]

    def _call_fn(self, call: _CallFn) -> Any:
        with signal_scope(call.signal):
            if is_coroutine_callable(call.fn):
                return call_to_completion(call.fn)  # an async step function in a sync body
            return call.fn()

    def _run_flow(self, name: str, fn: Callable[[], Any]) -> Flow[Any]:
        refuse_async(fn, what=f"step.run({name!r})", meta={"step": name}, allow_coroutines=True)
        record = self._enter(name)
        if record is not None and record.status == "done":
            return self._replayed(name, record.output)
        started = self._clock.now_ms()
        step_signal = self._signal.child()
        with self._step_deadline(name, step_signal, started):
            output = yield _CallFn(fn, step_signal)
        stored = self._sealed(name, output)
        # started: when fn began, so the step's duration (finished - started) is the time fn took
        done = self._record(name, "done", output=stored, started_at_ms=started, finished_at_ms=self._clock.now_ms())
        yield from self._persist(done)
        return self._replayed(name, stored)

    @contextlib.contextmanager
    def _step_deadline(self, name: str, step_signal: CancelSignal, started: int) -> Iterator[None]:
        """The job's ``step_timeout`` over the block: the step's signal aborts at the ceiling, and the block
        raises the signal's reason — the timeout, or the cancel — once it ended with the signal aborted
        (an error the function raised because of it is chained)."""
        timer = None
        if self._step_timeout_ms is not None:
            ceiling = self._step_timeout_ms

            def on_ceiling() -> None:
                step_signal.abort(
                    JobTimeoutError(f"step {name!r} passed its step_timeout of {ceiling} ms", {"step": name})
                )

            timer = self._clock.call_at(started + ceiling, on_ceiling)
        try:
            yield
        except Exception as exc:
            if step_signal.reason is not None and not self._signal.aborted and step_signal.reason is not exc:
                raise step_signal.reason from exc
            raise
        finally:
            if timer is not None:
                timer.cancel()
        if step_signal.reason is not None and not self._signal.aborted:
            raise step_signal.reason

    def _atomic_flow(self, name: str, fn: Callable[[], Any], using: str | None) -> Flow[Any]:
        alias = self._transactional_alias(name, fn, using)
        record = self._enter(name)
        if record is not None and record.status == "done":
            return self._replayed(name, record.output)
        started = self._clock.now_ms()
        step_signal = self._signal.child()
        with self._step_deadline(name, step_signal, started):
            done: StepRecord = yield _InTransaction(name, fn, step_signal, alias, started)
        self._records[name] = done
        return self._replayed(name, done.output)

    def _transactional_alias(self, name: str, fn: Callable[[], Any], using: str | None) -> str:
        """The alias ``step.atomic`` runs its transaction on, or its refusal (``X_STEP_ATOMIC_UNSUPPORTED``)."""
        meta = {"step": name, "job_id": self._job_id}
        if is_coroutine_callable(fn) or asyncio.iscoroutine(fn):
            raise StepAtomicUnsupportedError(
                f"step.atomic({name!r}) takes a plain def: Django's transactions are synchronous, so the "
                "function runs on one thread inside transaction.atomic() — write it with the sync ORM "
                "(an async body awaits run.step.atomic() all the same)",
                meta,
            )
        transactions = self._transactions
        if transactions is None or transactions.alias is None:
            raise StepAtomicUnsupportedError.outside_django(
                transactions.driver if transactions is not None else "none", name
            )
        if using is not None and using != transactions.alias:
            raise StepAtomicUnsupportedError(
                f"step.atomic({name!r}, using={using!r}): the jobs live in database {transactions.alias!r}, and "
                "only writes there commit with the step's checkpoint — write through that alias, or use "
                "run.step.run() with an idempotency key on the effect",
                {**meta, "using": using, "alias": transactions.alias},
            )
        return transactions.alias

    def _in_transaction(self, call: _InTransaction) -> StepRecord:
        """Run the function and save its checkpoint in one transaction on the jobs' database; answers the
        saved record. Anything raised — the function's error, its timeout or cancel, a lost claim — rolls
        both back."""
        assert self._transactions is not None
        with transaction.atomic(using=call.alias):
            output = self._call_fn(_CallFn(call.fn, call.signal))
            if call.signal.reason is not None:  # cancelled or timed out while it ran: none of it commits
                raise call.signal.reason
            stored = self._sealed(call.name, output)
            done = self._record(
                call.name, "done", output=stored, started_at_ms=call.started, finished_at_ms=self._clock.now_ms()
            )
            self._refuse_if_aborted(call.name)
            if not self._transactions.save_held(done):
                raise LeaseLostError(
                    f"step {call.name!r} rolled back: this worker no longer holds the job's claim, so neither "
                    "its writes nor its checkpoint were committed",
                    {"step": call.name, "job_id": self._job_id},
                )
        return done

    def _sleep_flow(self, name_or_duration: str | Duration, duration: Duration | None) -> Flow[None]:
        if duration is None:
            ms = parse_duration(name_or_duration, field="step.sleep")
            name = f"sleep:{format_duration(ms)}"
        else:
            if not isinstance(name_or_duration, str):
                raise InvariantError("step.sleep(name, duration): the name must be a string", {})
            name = name_or_duration
            ms = parse_duration(duration, field="step.sleep")
        if ms < 0:
            raise InvariantError(f"step.sleep {name!r}: a negative duration", {"step": name})
        record = self._enter(name)
        now = self._clock.now_ms()
        if record is None:
            wake = now + ms
            yield from self._persist(self._record(name, "sleeping", wake_at_ms=wake))
        else:
            wake = record.wake_at_ms or now
        if now < wake:
            raise StepSuspension(name, wake, "sleep")

    def _wait_flow(
        self, name: str, event: str, timeout: Duration, match: Mapping[str, Any] | None, required: bool
    ) -> Flow[Any]:
        timeout_ms = parse_duration(timeout, field="wait_for_event.timeout")
        if timeout_ms <= 0:
            raise InvariantError(f"wait_for_event {name!r}: timeout must be positive", {"step": name})
        record = self._enter(name)
        if record is not None and record.status == "done":
            return self._replayed(name, record.output)
        bus: EventBus = yield self._bus
        # Read the bus clock BEFORE asking: an event the ask misses was published after this instant,
        # so a deadline this instant has passed is a timeout only once the bus was asked after it.
        bus_now: int = yield bus.now
        if record is None:
            since = bus_now
            meta = {"event": event, "match": dict(match or {}), "since_ms": since, "deadline_ms": since + timeout_ms}
            _json_roundtrip(name, meta)
            record = self._record(name, "waiting", meta=meta)
            yield from self._persist(record)
        since, deadline = int(record.meta["since_ms"]), int(record.meta["deadline_ms"])
        found = yield functools.partial(bus.find, event, match, since_ms=since)
        if found is not None:
            data = self._sealed(name, dict(found.data))
            done = self._record(name, "done", output=data, finished_at_ms=self._clock.now_ms(), meta=record.meta)
            yield from self._persist(done)
            return self._replayed(name, data)
        if bus_now >= deadline:
            if required:
                raise JobTimeoutError(
                    f"wait_for_event {name!r}: no {event!r} event matched within {timeout_ms} ms",
                    {"step": name, "event": event},
                )
            timed_out = self._record(name, "done", output=None, finished_at_ms=self._clock.now_ms(), meta=record.meta)
            yield from self._persist(timed_out)
            return None
        park = min(self._event_poll_ms, deadline - bus_now)
        raise StepSuspension(name, self._clock.now_ms() + park, "wait")

    # -- step.run ------------------------------------------------------------------------------

    def run(self, name: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` once ever under ``name``; a replay answers the stored output without calling it.

        ``fn`` reads its cancel signal with :func:`~ultimate_jobs.current_signal` — the step's own
        signal, which the job's ``step_timeout`` aborts. The output must be JSON-serialisable, and
        the value returned is the stored JSON (a tuple comes back a list, on the first run as on replay),
        except that a secret object comes back as itself. An output that holds a secret is stored sealed.
        An ``async def`` ``fn`` runs to completion here (``asgiref.sync.async_to_sync``).
        """
        return self._drive(self._run_flow(name, fn))  # type: ignore[no-any-return]

    def atomic(self, name: str, fn: Callable[[], T], *, using: str | None = None) -> T:
        """Run ``fn`` once ever under ``name``, inside ``transaction.atomic()`` on the jobs' database, and
        write the step's checkpoint in that same transaction: its database writes and its checkpoint
        commit together or not at all. A worker killed before the commit leaves neither (the step runs
        again, cleanly); one killed after leaves both (the step replays). A worker that lost the job's
        claim cannot commit: its writes roll back, and the new owner's run is the one that counts.

        For writes to the database the jobs live in (an order marked paid, a ledger row); an enqueue
        inside ``fn`` commits with it too. Not for effects outside that database (an HTTP call, an email):
        use :meth:`run` with an idempotency key on the call. ``fn`` is a plain ``def`` (Django's
        transactions are synchronous); the output rules are :meth:`run`'s; the step's timeout or a cancel
        rolls the transaction back. ``using`` may only name the jobs' own alias. Refused with
        ``X_STEP_ATOMIC_UNSUPPORTED`` on a driver whose jobs live outside Django's databases (Redis,
        memory), for another alias, and for an ``async def`` ``fn``.
        """
        return self._drive(self._atomic_flow(name, fn, using))  # type: ignore[no-any-return]

    def _sealed(self, name: str, output: Any) -> Any:
        """``output`` as it is stored: its JSON, with every secret object and every value that quotes a
        secret of the job's input sealed — the whole output when its JSON still quotes one."""
        # what no database can store is refused on this attempt, terminally: a retry would store it no better
        check_json(output, field=f"step {name!r}: the output", refuse=_invariant(name))
        refuse_reserved(output, f"step {name!r}: the output", error=InvariantError, meta={"step": name})
        stored = _json_roundtrip(name, output)
        if not self._quotes:
            return stored
        stored = _seal_quoting(stored, self._quotes)
        return seal(stored) if _quotes_any(stored, self._quotes) else stored

    def _replayed(self, name: str, stored: Any) -> Any:
        """A stored output as the body reads it: every sealed value opened, a secret object rebuilt."""
        return unseal(stored, restore=True, what=f"step {name!r}: the output")

    # -- step.sleep ----------------------------------------------------------------------------

    def sleep(self, name_or_duration: str | Duration, duration: Duration | None = None) -> None:
        """Suspend the run for ``duration`` without holding a process: ``step.sleep("3d")`` or
        ``step.sleep("cool-off", "3d")`` (the one-argument form names the step ``sleep:3d``)."""
        self._drive(self._sleep_flow(name_or_duration, duration))

    # -- step.wait_for_event -------------------------------------------------------------------

    def wait_for_event(
        self,
        name: str,
        event: str,
        *,
        timeout: Duration,
        match: Mapping[str, Any] | None = None,
        required: bool = False,
    ) -> Any:
        """Suspend until :func:`publish_event` publishes ``event`` whose data contains ``match``.

        Answers the event's data, or ``None`` when ``timeout`` passes first — ``X_JOB_TIMEOUT``
        instead when ``required=True``. Between polls the run parks for the job's ``event_poll``.
        The wait is stamped and judged on the bus's clock (``bus.now()``), never this process's, and
        the bus is asked once more after that clock shows the deadline passed before the wait times
        out — a worker running ahead of the database neither misses an answer nor gives up early.
        """
        return self._drive(self._wait_flow(name, event, timeout, match, required))


class AsyncStep(Step):
    """The step runner of an ``async def`` body: the same steps, awaited.

    >>> charge = await run.step.run("charge", charge_card)   # an async def, or a plain def
    >>> await run.step.sleep("3d")
    >>> paid = await run.step.wait_for_event("paid", "invoice.paid", timeout="7d", match={"id": 7})

    The replay, the duplicate-name rule, the sealing and the suspensions are :class:`Step`'s. The driver
    and event-bus calls run on the lane's offload threads (``offload``), never on the event loop. A plain
    ``def`` step function runs through ``asgiref.sync.sync_to_async``, thread-sensitive: on the thread the
    body's Django ORM uses, one per lane — a long blocking call there holds up every async body's ORM, so
    make it async, or hand it over with ``sync_to_async(fn, thread_sensitive=False)``. An async step
    function is a task of its own, cancelled when the step's signal aborts: the job's ``step_timeout``
    (the step raises ``X_JOB_TIMEOUT``), or the run's cancel.
    """

    def __init__(self, *, offload: Callable[..., Awaitable[Any]], **options: Any) -> None:
        super().__init__(**options)
        self._offload = offload

    async def _adrive(self, flow: Flow[T]) -> T:
        finished, value = _advance(flow)
        while not finished:
            try:
                if isinstance(value, _CallFn):
                    answer = await self._acall_fn(value)
                elif isinstance(value, _InTransaction):  # the function and the save on the ORM's one thread
                    answer = await sync_to_async(self._in_transaction)(value)
                else:
                    answer = await self._offload(value)
            except BaseException as exc:
                finished, value = _advance(flow, error=exc)
            else:
                finished, value = _advance(flow, answer)
        return value  # type: ignore[no-any-return]

    async def _acall_fn(self, call: _CallFn) -> Any:
        with signal_scope(call.signal):
            work = call.fn() if is_coroutine_callable(call.fn) else sync_to_async(call.fn)()
            task = asyncio.ensure_future(work)  # in this context: the step's signal is its current_signal()
        if await cancel_on_abort(call.signal, task) and task.cancelled():
            raise call.signal.reason or JobAbortedError("the step was cancelled")
        return task.result()

    async def run(self, name: str, fn: Callable[[], Any]) -> Any:  # type: ignore[override]
        """``await step.run(name, fn)``: :meth:`Step.run`, with ``fn`` an ``async def`` or a plain ``def``."""
        return await self._adrive(self._run_flow(name, fn))

    async def atomic(self, name: str, fn: Callable[[], Any], *, using: str | None = None) -> Any:  # type: ignore[override]
        """``await step.atomic(name, fn)``: :meth:`Step.atomic`; ``fn`` (a plain ``def``) and the checkpoint's
        save run in one transaction on the thread the body's ORM uses (``sync_to_async``, thread-sensitive)."""
        return await self._adrive(self._atomic_flow(name, fn, using))

    async def sleep(self, name_or_duration: str | Duration, duration: Duration | None = None) -> None:  # type: ignore[override]
        """``await step.sleep("3d")``: :meth:`Step.sleep`."""
        await self._adrive(self._sleep_flow(name_or_duration, duration))

    async def wait_for_event(
        self,
        name: str,
        event: str,
        *,
        timeout: Duration,
        match: Mapping[str, Any] | None = None,
        required: bool = False,
    ) -> Any:
        """``await step.wait_for_event(...)``: :meth:`Step.wait_for_event`; the bus is asked off the loop."""
        return await self._adrive(self._wait_flow(name, event, timeout, match, required))


class _CallFn:
    """A flow's request to call the step's function under the step's signal."""

    __slots__ = ("fn", "signal")

    def __init__(self, fn: Callable[[], Any], signal: CancelSignal) -> None:
        self.fn, self.signal = fn, signal


class _InTransaction:
    """A flow's request to run a transactional step: the function and the checkpoint's save in one
    transaction on ``alias`` (:meth:`Step._in_transaction`), answered with the saved record."""

    __slots__ = ("alias", "fn", "name", "signal", "started")

    def __init__(self, name: str, fn: Callable[[], Any], signal: CancelSignal, alias: str, started: int) -> None:
        self.name, self.fn, self.signal, self.alias, self.started = name, fn, signal, alias, started


def _advance(flow: Flow[Any], answer: Any = None, *, error: BaseException | None = None) -> tuple[bool, Any]:
    """Send a flow the answer to its last call (or throw it the call's error: its except and finally see it,
    and what it raises propagates): ``(True, the step's value)`` once it returned, else ``(False, its next
    call)``."""
    try:
        return False, (flow.throw(error) if error is not None else flow.send(answer))
    except StopIteration as done:
        return True, done.value


Flow = Generator[Any, Any, T]
"""A step's flow: yields a thunk (or a :class:`_CallFn`) per sync call, is sent its answer, returns the step's."""


def _json_roundtrip(name: str, value: Any) -> Any:
    check_json(value, field=f"step {name!r}: the output", refuse=_invariant(name))
    try:
        # NaN/Infinity are not JSON (jsonb refuses them); a secret object is sealed where it stands
        return json.loads(json.dumps(value, allow_nan=False, default=seal_object))
    except (TypeError, ValueError) as exc:
        raise InvariantError(
            f"step {name!r} returned a value that is not JSON-serialisable ({exc}); return plain dicts, lists, "
            "strings, numbers, booleans or None — a step's output is persisted and replayed",
            {"step": name},
        ) from exc


def _seal_quoting(value: Any, quotes: list[str]) -> Any:
    """``value`` (JSON) with every string or number that quotes one of ``quotes`` sealed."""
    if is_envelope(value):
        return value
    if isinstance(value, dict):
        return {key: _seal_quoting(item, quotes) for key, item in value.items()}
    if isinstance(value, list):
        return [_seal_quoting(item, quotes) for item in value]
    if value is None or isinstance(value, bool) or not _quotes_any(value, quotes):
        return value
    return seal(value)


def _quotes_any(value: Any, quotes: list[str]) -> bool:
    """Whether ``value`` (JSON) quotes one of ``quotes`` as text or in its JSON, ASCII-escaped or not."""
    texts = (value if isinstance(value, str) else "", json.dumps(value), json.dumps(value, ensure_ascii=False))
    return any(quote in text for text in texts for quote in quotes)


def _invariant(step: str) -> Callable[[str, dict[str, Any]], UltimateError]:
    """Refusals of what a step would store, as ``X_INVARIANT`` (terminal: no retry stores it better)."""

    def refuse(message: str, meta: dict[str, Any]) -> UltimateError:
        return InvariantError(
            f"{message} — a step's name and output are persisted and replayed", {"step": step, **meta}
        )

    return refuse
