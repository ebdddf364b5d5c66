"""The outbox store seam: the protocol both stores implement and the records they trade in.

A store holds staged enqueues until a relay publishes them. ``stage()`` writes rows in the caller's
transaction (the Postgres store runs it on the caller's connection); ``claim()`` is a claim, not a
read — it stamps ``claimed_at``/``claimed_by`` in the statement that locks the rows, and that stamp
is a lease of ``claim_lease_ms``; ``release()`` and ``mark_published()`` are fenced on the claimant
token the claim handed back, so a relay that stalled past its lease owns nothing when it wakes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from ..errors import InvariantError
from .jobs import EnqueueRequest

DEFAULT_CLAIM_LEASE_MS = 30_000
OUTBOX_WAKE_CHANNEL = "x_outbox_wake"

OutboxMode = Literal["optional", "required", "off"]
OUTBOX_MODES: tuple[OutboxMode, ...] = ("optional", "required", "off")

_REQUEST_FIELDS = frozenset(f.name for f in dataclasses.fields(EnqueueRequest))


@dataclass(frozen=True, slots=True)
class OutboxRecord:
    """One staged row. ``id`` IS the job id the publish will use and ``run_id`` the job's run id;
    ``request`` carries both. ``claimed_by`` is the claim's token (``None`` on a row nobody holds) —
    pass it back to :meth:`OutboxStore.release` and :meth:`OutboxStore.mark_published`."""

    id: str
    run_id: str
    request: EnqueueRequest
    staged_at_ms: int
    claimed_by: str | None = None
    claimed_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class OutboxStats:
    """The outbox at a glance: rows waiting to publish, rows set aside by a permanent error, and the stage
    instant of the oldest waiting row (``None`` when none waits)."""

    pending: int
    failed: int
    oldest_pending_ms: int | None


@dataclass(frozen=True, slots=True)
class FailedOutboxRow:
    """A row a permanent publish error set aside: what the operator lists, retries or removes."""

    id: str
    name: str
    queue: str
    staged_at_ms: int
    failed_at_ms: int
    error: str | None


@runtime_checkable
class OutboxStore(Protocol):
    """Where staged enqueues wait for the relay. Rows come back from :meth:`claim` in ``staged_at, id``
    order — total, so two relays compose a batch in the same order."""

    name: str
    claim_lease_ms: int
    supports_wake: bool
    """Whether :meth:`subscribe` tells a listener when rows are staged (``False``: the relay polls)."""
    supports_listen: bool
    """Whether the wake also carries other processes' stages and :meth:`wake_is_live` answers whether it is
    proven (the relay's idle poll then rises to 5 s)."""

    def subscribe(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call ``listener`` when rows are staged; answers an unsubscribe. Called only when ``supports_wake``."""

    def wake_is_live(self) -> bool:
        """Whether the cross-process wake is proven right now. Called only when ``supports_listen``."""

    def in_transaction(self) -> bool:
        """Whether a :meth:`stage` now would join a transaction the caller holds (the router's
        ``current_tx``): for Postgres, an open ``atomic()`` block on the jobs database."""

    def stage(self, requests: Sequence[EnqueueRequest]) -> list[OutboxRecord]:
        """Write one row per request, in order, in the caller's transaction. Every request must carry
        its ``id`` and ``run_id`` (the router allocates them); ``X_INVARIANT`` otherwise."""

    def claim(self, *, claimant: str, limit: int) -> list[OutboxRecord]:
        """Take up to ``limit`` unpublished rows nobody holds (or whose claim lease lapsed), oldest first,
        stamping a fresh claim token built from ``claimant`` on each."""

    def release(self, ids: Sequence[str], *, claimed_by: str, error: str | None = None) -> frozenset[str]:
        """Hand rows back for the next claim at once, fenced on ``claimed_by``; answers the ids that landed."""

    def mark_published(self, ids: Sequence[str], *, claimed_by: str) -> frozenset[str]:
        """Retire published rows, fenced on ``claimed_by``; answers the ids that landed."""

    def set_aside(self, ids: Sequence[str], *, claimed_by: str, error: str) -> frozenset[str]:
        """Take rows out of the claim order with the permanent error that stopped their publish, fenced on
        ``claimed_by``; answers the ids that landed."""

    def backlog(self) -> int:
        """How many staged rows wait to be published (not counting set-aside rows)."""

    def stats(self) -> OutboxStats:
        """Pending and set-aside counts and the oldest pending row's stage instant."""

    def failed(self, *, limit: int) -> list[FailedOutboxRow]:
        """The set-aside rows, oldest stage first."""

    def retry_failed(self, ids: Sequence[str]) -> frozenset[str]:
        """Put set-aside rows back in the claim order (they keep their place); answers the ids that landed."""

    def remove_failed(self, ids: Sequence[str]) -> frozenset[str]:
        """Delete set-aside rows for good; answers the ids that landed."""

    def purge_published(self, *, before_ms: int, limit: int) -> int:
        """Retention: delete at most ``limit`` published rows (the audit trail) published before
        ``before_ms``, oldest first, in one statement; answers how many went. A row still waiting, or set
        aside, never goes."""


def check_claim_lease(value: object) -> int:
    """``claim_lease_ms`` must be a positive whole number of milliseconds; anything else is ``X_INVARIANT``."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvariantError(
            f"claim_lease_ms = {value!r}; it must be a positive whole number of milliseconds (default "
            f"{DEFAULT_CLAIM_LEASE_MS}) — how long a dead relay's rows wait before another relay may take them",
            {"field": "claim_lease_ms", "value": repr(value)},
        )
    return value


def check_limit(limit: object) -> int:
    """A claim's ``limit``: a whole number >= 1."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvariantError(f"claim(limit={limit!r}): pass a whole number >= 1", {"limit": repr(limit)})
    return limit


def check_staged(requests: Sequence[EnqueueRequest]) -> None:
    """Every staged request names its job: ``id`` and ``run_id`` allocated before the row is written."""
    for request in requests:
        if not request.id or not request.run_id:
            raise InvariantError(
                f"{request.name}: a staged request must carry id and run_id (allocated at stage time); "
                "stage through the outbox router, which allocates them",
                {"job": request.name},
            )


def request_to_json(request: EnqueueRequest) -> dict[str, Any]:
    """The whole request as JSON (the ``x_outbox.request`` column)."""
    data = dataclasses.asdict(request)
    data["input"] = dict(request.input)
    return data


def request_from_json(data: Mapping[str, Any]) -> EnqueueRequest:
    """The request a row stored; keys this version does not know are ignored (a newer stager's fields)."""
    return EnqueueRequest(**{k: v for k, v in data.items() if k in _REQUEST_FIELDS})


def publish_request(record: OutboxRecord) -> EnqueueRequest:
    """What the relay hands the driver for one row: the staged request under the row's own ids, so a
    repeat publish meets the job the first one made. Always ``on_conflict="dedupe"``: nobody is left to
    raise a duplicate to, and a refusal must not stop the outbox behind it."""
    return dataclasses.replace(record.request, id=record.id, run_id=record.run_id, on_conflict="dedupe")


WakeListener = Callable[[str], None]
