"""What both SQL event buses share: the refusal of a publish that cannot be stored, and the purge loop."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...core.durations import Duration, parse_duration
from ...defaults import PURGE_BATCH
from ...errors import InvariantError
from .dialect import dumps


def checked_publish(event: str, data: Mapping[str, Any], ttl: Duration) -> tuple[dict[str, Any], str, int]:
    """The body, its JSON text and the ttl in ms of a publish — ``X_INVARIANT`` for an empty event name, a
    ttl that is not positive, or data that is not JSON."""
    if not isinstance(event, str) or not event:
        raise InvariantError("publish_event: the event name must be a non-empty string", {})
    ttl_ms = parse_duration(ttl, field="ttl")
    if ttl_ms <= 0:
        raise InvariantError(f"publish_event {event!r}: ttl must be positive, got {ttl_ms} ms", {"event": event})
    body = dict(data)
    try:
        encoded = dumps(body)
    except (TypeError, ValueError) as exc:  # NaN/Infinity and objects are not JSON
        raise InvariantError(
            f"publish_event {event!r}: the data is not JSON-serialisable ({exc}); publish plain dicts, lists, "
            "strings, numbers, booleans or None",
            {"event": event},
        ) from exc
    return body, encoded, ttl_ms


def purge_in_batches(purge_batch: Callable[[int], int]) -> int:
    """Run ``purge_batch(limit)`` (one short statement deleting at most ``limit`` expired events) until a
    batch comes back short; answers how many went."""
    removed = 0
    while True:
        count = purge_batch(PURGE_BATCH)
        removed += count
        if count < PURGE_BATCH:
            return removed
