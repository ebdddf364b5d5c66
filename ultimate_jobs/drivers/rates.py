"""The one decision every driver's rate store makes for a take (``driver.rates.take``), written once: the
SQLite, Redis and memory stores run it on the values they read (the Redis one in Lua, line for line), and
the Postgres statement ``SQL_RATE_TAKE`` says the same in SQL.

A key's schedule is its next free instant (a generic cell rate algorithm: each start moves it one interval
on from the later of itself and now). A run that finds it later than now takes it — the schedule moves on
past it — and waits for it: in its slot when it is at most ``near_ms`` away (the instant is its own, no
reservation is stored and it starts without another take), else on a stored reservation; back within
``near_ms`` of that instant, or after it within one interval, it spends the reservation and waits out the
rest in its slot. Back later than that (its worker was busy), the reservation is stale: it takes the next
free instant like any run, so starts stay spaced however late a run comes back.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Taken:
    """A take's outcome: the wait it answers (``0``: start now), the key's next free instant to store
    (``None``: unchanged) and the holder's reservation to keep (``None``: none)."""

    wait_ms: int
    next_at_ms: int | None
    hold_at_ms: int | None


def decide(hold_at_ms: int | None, next_at_ms: int | None, *, interval_ms: int, now_ms: int, near_ms: int = 0) -> Taken:
    """The take of a holder with reservation ``hold_at_ms`` (``None``: none) on a key whose next free
    instant is ``next_at_ms`` (``None``: never taken), by a caller that waits up to ``near_ms`` itself."""
    if hold_at_ms is not None and hold_at_ms > now_ms - interval_ms:
        if hold_at_ms - now_ms > near_ms:  # back early: keep waiting for it
            return Taken(hold_at_ms - now_ms, None, hold_at_ms)
        return Taken(max(0, hold_at_ms - now_ms), None, None)  # near or at its instant: spend it, start on it
    at = now_ms if next_at_ms is None else max(next_at_ms, now_ms)
    return Taken(at - now_ms, at + interval_ms, at if at - now_ms > near_ms else None)
