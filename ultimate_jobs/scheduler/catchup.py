"""What a due task fires: the catch-up policies over a watermark, as plain functions of the clock.

The watermark is the last occurrence a task has dealt with (fired or passed over). Everything after
it and at or before now is due; what fires is the policy's answer:

=========  ======================================  ============================================
policy     fires                                   the watermark moves to
=========  ======================================  ============================================
skip       the TRUE latest due occurrence, found   that occurrence (the older ones are dropped)
           by bisection over the gap
run-once   the earliest due occurrence, once       the latest due occurrence — past the rest,
                                                   so a day down is one catch-up, not 24
run-all    every due occurrence, in order, at      each occurrence as it fires; the next tick
           most ``max_catch_up`` per tick          walks on from there
=========  ======================================  ============================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .task import CatchUp


class Schedule(Protocol):
    """Anything that resolves "the first occurrence strictly after ``ms``" (a :class:`CronSchedule`)."""

    def next_after(self, after_ms: int) -> int: ...


@dataclass(frozen=True, slots=True)
class PlannedFire:
    """One fire: the occurrence it dispatches, and where the watermark moves in the same statement."""

    occurrence_ms: int
    watermark_ms: int


def latest_due(schedule: Schedule, after_ms: int, now_ms: int) -> int:
    """The latest occurrence in ``(after_ms, now_ms]``, given that one exists. Bisection over the
    milliseconds of the gap: about 25 evaluations for three hours, 35 for a year — never a walk.

    Invariant: ``next_after(lo)`` is due and ``next_after(hi)`` is not. When ``hi == lo + 1`` the
    occurrence after ``lo`` can only be ``hi`` itself, and nothing after it is due.
    """
    first = schedule.next_after(after_ms)
    if first > now_ms:
        raise ValueError(f"nothing is due: the first occurrence after {after_ms} is {first}, after {now_ms}")
    if schedule.next_after(first) > now_ms:  # the usual tick: exactly one occurrence is due
        return first
    lo, hi = first, now_ms
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if schedule.next_after(mid) <= now_ms:
            lo = mid
        else:
            hi = mid
    return hi


def plan_fires(
    schedule: Schedule, *, policy: CatchUp, max_catch_up: int, watermark_ms: int, now_ms: int
) -> list[PlannedFire]:
    """The fires one tick makes for a task whose watermark is ``watermark_ms`` (none when nothing is due)."""
    first = schedule.next_after(watermark_ms)
    if first > now_ms:
        return []
    if policy == "skip":
        latest = latest_due(schedule, watermark_ms, now_ms)
        return [PlannedFire(latest, latest)]
    if policy == "run-once":
        return [PlannedFire(first, latest_due(schedule, watermark_ms, now_ms))]
    fires = [PlannedFire(first, first)]
    while len(fires) < max_catch_up:
        following = schedule.next_after(fires[-1].occurrence_ms)
        if following > now_ms:
            break
        fires.append(PlannedFire(following, following))
    return fires
