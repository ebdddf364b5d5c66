"""The one check every driver's retention delete runs before its statement: which finished states, by
which instant, and how many rows at most."""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import InvariantError
from .base import FINISHED_STATES, JobState


def finished_cutoffs(before_ms: Mapping[JobState, int], limit: int) -> dict[JobState, int]:
    """``before_ms`` checked: finished states only (``X_INVARIANT`` on a live one — retention never deletes
    work still to do), each an int instant, and ``limit`` at least 1."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvariantError(f"purge_finished: limit must be an int >= 1, got {limit!r}", {"limit": limit})
    cutoffs: dict[JobState, int] = {}
    for state, instant in before_ms.items():
        if state not in FINISHED_STATES:
            raise InvariantError(
                f"purge_finished: {state!r} is not a finished state; retention deletes only {FINISHED_STATES}",
                {"state": state},
            )
        if isinstance(instant, bool) or not isinstance(instant, int):
            raise InvariantError(f"purge_finished: the {state} cutoff must be epoch ms, got {instant!r}", {})
        cutoffs[state] = instant
    return cutoffs
