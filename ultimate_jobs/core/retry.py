"""Retry policy and schedule: exponential, linear or fixed backoff, a ceiling, and equal jitter."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import InvariantError, JobDeclarationInvalidError
from .durations import Duration, parse_duration

Backoff = Literal["exponential", "linear", "fixed"]

DEFAULT_ATTEMPTS = 3
DEFAULT_DELAY_MS = 1_000
DEFAULT_MAX_DELAY_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``attempts`` in all (1 = no retry), the backoff shape, its first ``delay_ms``, the
    ``max_delay_ms`` ceiling, equal ``jitter`` (on by default) and ``dead_letter`` (``False`` drops
    exhausted jobs to ``failed`` instead of the dead-letter queue).

    >>> RetryPolicy(attempts=5, backoff="exponential", delay_ms=1000)
    """

    attempts: int = DEFAULT_ATTEMPTS
    backoff: Backoff = "exponential"
    delay_ms: int = DEFAULT_DELAY_MS
    max_delay_ms: int = DEFAULT_MAX_DELAY_MS
    jitter: bool = True
    dead_letter: bool = True

    def as_dict(self) -> dict[str, Any]:
        """The descriptor shape."""
        return {
            "attempts": self.attempts,
            "backoff": self.backoff,
            "delay_ms": self.delay_ms,
            "max_delay_ms": self.max_delay_ms,
            "jitter": self.jitter,
            "dead_letter": self.dead_letter,
        }


_RETRY_KEYS = {"attempts", "backoff", "delay", "max_delay", "jitter", "dead_letter"}


def retry_policy(value: RetryPolicy | Mapping[str, Any] | None, *, job: str = "job") -> RetryPolicy:
    """Build and validate a policy from a declaration: ``{"attempts": 5, "backoff": "linear", "delay": "2s"}``.

    Anything unusable is ``X_JOB_DECLARATION_INVALID`` naming the field, at declaration.
    """
    if value is None:
        return RetryPolicy()
    if isinstance(value, RetryPolicy):
        policy = value
    elif isinstance(value, Mapping):
        unknown = set(value) - _RETRY_KEYS
        if unknown:
            raise JobDeclarationInvalidError(
                f"{job}: retry has unknown keys {sorted(unknown)}; use {sorted(_RETRY_KEYS)}",
                {"job": job, "field": "retry"},
            )
        try:
            policy = RetryPolicy(
                attempts=value.get("attempts", DEFAULT_ATTEMPTS),
                backoff=value.get("backoff", "exponential"),
                delay_ms=parse_duration(value.get("delay", DEFAULT_DELAY_MS), field="retry.delay"),
                max_delay_ms=parse_duration(value.get("max_delay", DEFAULT_MAX_DELAY_MS), field="retry.max_delay"),
                jitter=value.get("jitter", True),
                dead_letter=value.get("dead_letter", True),
            )
        except InvariantError as exc:
            raise JobDeclarationInvalidError(f"{job}: {exc.message}", {"job": job, "field": "retry"}) from exc
    else:
        raise JobDeclarationInvalidError(f"{job}: retry must be a dict or RetryPolicy", {"job": job, "field": "retry"})
    _validate(policy, job)
    return policy


def _validate(policy: RetryPolicy, job: str) -> None:
    def bad(field: str, why: str) -> JobDeclarationInvalidError:
        return JobDeclarationInvalidError(f"{job}: retry.{field} {why}", {"job": job, "field": f"retry.{field}"})

    if isinstance(policy.attempts, bool) or not isinstance(policy.attempts, int) or policy.attempts < 1:
        raise bad("attempts", f"must be a whole number >= 1, got {policy.attempts!r}")
    if policy.backoff not in ("exponential", "linear", "fixed"):
        raise bad("backoff", f"must be 'exponential', 'linear' or 'fixed', got {policy.backoff!r}")
    if isinstance(policy.delay_ms, bool) or not isinstance(policy.delay_ms, int) or policy.delay_ms < 0:
        raise bad("delay", f"must be a whole number of milliseconds >= 0, got {policy.delay_ms!r}")
    if isinstance(policy.max_delay_ms, bool) or not isinstance(policy.max_delay_ms, int):
        raise bad("max_delay", f"must be a whole number of milliseconds, got {policy.max_delay_ms!r}")
    if policy.max_delay_ms < policy.delay_ms:
        raise bad("max_delay", f"({policy.max_delay_ms} ms) is below delay ({policy.delay_ms} ms)")
    if not isinstance(policy.jitter, bool):
        raise bad("jitter", "must be True or False")
    if not isinstance(policy.dead_letter, bool):
        raise bad("dead_letter", "must be True or False")


def base_delay_ms(policy: RetryPolicy, attempt: int) -> int:
    """The un-jittered wait after failed attempt ``attempt`` (1-based), clamped by ``max_delay_ms``."""
    if policy.backoff == "exponential":
        raw = policy.delay_ms * (1 << min(attempt - 1, 62))
    elif policy.backoff == "linear":
        raw = policy.delay_ms * attempt
    else:
        raw = policy.delay_ms
    return min(raw, policy.max_delay_ms)


def retry_schedule(policy: RetryPolicy | Mapping[str, Any]) -> list[int]:
    """The waits between attempts, without jitter.

    >>> retry_schedule({"attempts": 5, "backoff": "exponential", "delay": 1000})
    [1000, 2000, 4000, 8000]
    """
    resolved = retry_policy(policy)
    return [base_delay_ms(resolved, attempt) for attempt in range(1, resolved.attempts)]


def equal_jitter(delay_ms: int, rng: random.Random | None = None) -> int:
    """Half the delay fixed, half uniform: a burst of failures does not retry in lockstep."""
    half = delay_ms // 2
    return half + int((rng or random).random() * (delay_ms - half + 1))


def backoff_ms(policy: RetryPolicy, attempt: int, rng: random.Random | None = None) -> int:
    """The wait after failed attempt ``attempt``, jittered when the policy says so."""
    delay = base_delay_ms(policy, attempt)
    return equal_jitter(delay, rng) if policy.jitter else delay


def retry_after_delay_ms(policy: RetryPolicy, seconds: float, rng: random.Random | None = None) -> int:
    """The wait a responder named (``meta.retryAfterSeconds``), clamped by ``max_delay_ms``, spread upward
    by up to 10% unless ``jitter=False`` so deliveries handed one instant do not wake together."""
    stated = min(int(seconds * 1000), policy.max_delay_ms)
    if not policy.jitter:
        return stated
    spread = int((rng or random).random() * stated * 0.1)
    return min(stated + spread, policy.max_delay_ms)


def is_final_attempt(policy: RetryPolicy, attempt: int) -> bool:
    """True when a failure of ``attempt`` is not retried for want of attempts — the one comparison
    the runner dead-letters on."""
    return attempt >= policy.attempts


def parse_optional_duration(value: Duration | None, *, field: str, job: str) -> int | None:
    """A declared ceiling in ms, ``None`` when absent; zero or negative is refused at declaration."""
    if value is None:
        return None
    try:
        ms = parse_duration(value, field=field)
    except InvariantError as exc:
        raise JobDeclarationInvalidError(f"{job}: {exc.message}", {"job": job, "field": field}) from exc
    if ms <= 0:
        raise JobDeclarationInvalidError(
            f"{job}: {field} must be positive; a zero or negative ceiling would mean no ceiling at all",
            {"job": job, "field": field},
        )
    return ms
