"""Durations and retry policy: the one parser, the schedule, jitter, and the declaration refusals."""

from __future__ import annotations

import math
import random
from datetime import timedelta

import pytest

from ultimate_jobs.core.durations import format_duration, parse_duration
from ultimate_jobs.core.retry import (
    RetryPolicy,
    backoff_ms,
    base_delay_ms,
    equal_jitter,
    is_final_attempt,
    retry_after_delay_ms,
    retry_policy,
    retry_schedule,
)
from ultimate_jobs.errors import UltimateError

# -- parse_duration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "ms"),
    [
        ("250ms", 250),
        ("10s", 10_000),
        ("5m", 300_000),
        ("2h", 7_200_000),
        ("3d", 259_200_000),
        ("1w", 604_800_000),
        (" 10s ", 10_000),
        ("1.5s", 1_500),
        ("1.001s", 1_001),
        ("0.25h", 900_000),
        (1000, 1000),
        (0, 0),
        (1500.0, 1500),
        (timedelta(seconds=2), 2_000),
        (timedelta(days=3), 259_200_000),
        (timedelta(milliseconds=1001), 1_001),
        (timedelta(hours=1, milliseconds=1), 3_600_001),
    ],
)
def test_parse_duration_accepts_every_form(value: object, ms: int) -> None:
    assert parse_duration(value) == ms
    assert type(parse_duration(value)) is int


@pytest.mark.parametrize(
    "value",
    [
        "soon",
        "",
        "10",
        "10 seconds",
        "10S",
        "-5s",
        "1.5ms",
        "0.0001s",
        "ms",
        True,
        False,
        None,
        1.5,
        math.nan,
        math.inf,
        [10],
        timedelta(microseconds=1500),
    ],
)
def test_parse_duration_refuses_junk_with_x_invariant(value: object) -> None:
    with pytest.raises(UltimateError) as caught:
        parse_duration(value, field="retry.delay")
    assert caught.value.code == "X_INVARIANT"
    assert caught.value.meta["field"] == "retry.delay"


@pytest.mark.parametrize(("ms", "text"), [(259_200_000, "3d"), (10_000, "10s"), (250, "250ms"), (90_000, "90s")])
def test_format_duration_is_the_shortest_exact_spelling(ms: int, text: str) -> None:
    assert format_duration(ms) == text
    assert parse_duration(text) == ms


# -- retry_schedule ----------------------------------------------------------------------------


def test_spec_example_exponential_schedule() -> None:
    assert retry_schedule({"attempts": 5, "backoff": "exponential", "delay": 1000}) == [1000, 2000, 4000, 8000]


def test_linear_and_fixed_schedules() -> None:
    assert retry_schedule({"attempts": 5, "backoff": "linear", "delay": "1s"}) == [1000, 2000, 3000, 4000]
    assert retry_schedule({"attempts": 4, "backoff": "fixed", "delay": 500}) == [500, 500, 500]


def test_one_attempt_has_no_retries() -> None:
    assert retry_schedule({"attempts": 1}) == []


def test_max_delay_clamps_every_shape() -> None:
    assert retry_schedule({"attempts": 6, "backoff": "exponential", "delay": 1000, "max_delay": "5s"}) == [
        1000,
        2000,
        4000,
        5000,
        5000,
    ]
    assert retry_schedule({"attempts": 5, "backoff": "linear", "delay": 1000, "max_delay": 2500}) == [
        1000,
        2000,
        2500,
        2500,
    ]


def test_a_huge_attempt_number_stays_clamped() -> None:
    policy = RetryPolicy(attempts=1000, delay_ms=1000, max_delay_ms=60_000)
    assert base_delay_ms(policy, 999) == 60_000


def test_schedule_accepts_a_policy_object() -> None:
    assert retry_schedule(RetryPolicy(attempts=3, backoff="linear", delay_ms=100)) == [100, 200]


# -- jitter ------------------------------------------------------------------------------------


def test_equal_jitter_is_on_by_default() -> None:
    assert RetryPolicy().jitter is True
    assert retry_policy({"attempts": 3}).jitter is True
    assert retry_policy(None).jitter is True


def test_equal_jitter_stays_within_half_and_full_delay_and_spreads() -> None:
    rng = random.Random(7)
    for delay in (0, 1, 2, 999, 1000, 1001, 60_000):
        for _ in range(200):
            waited = equal_jitter(delay, rng)
            assert delay // 2 <= waited <= delay
    spread = {equal_jitter(10_000, rng) for _ in range(100)}
    assert len(spread) > 50  # a burst of failures does not retry in lockstep


def test_backoff_jitters_when_on_and_is_exact_when_off() -> None:
    rng = random.Random(1)
    on = RetryPolicy(attempts=5, delay_ms=1000)
    waits = [backoff_ms(on, 3, rng) for _ in range(100)]
    assert all(2000 <= w <= 4000 for w in waits)
    assert len(set(waits)) > 10
    off = RetryPolicy(attempts=5, delay_ms=1000, jitter=False)
    assert [backoff_ms(off, a, rng) for a in (1, 2, 3, 4)] == [1000, 2000, 4000, 8000]


def test_seeded_jitter_is_reproducible() -> None:
    policy = RetryPolicy(attempts=5, delay_ms=1000)
    first = [backoff_ms(policy, 2, random.Random(42)) for _ in range(3)]
    assert first == [backoff_ms(policy, 2, random.Random(42))] * 3


# -- retry-after -------------------------------------------------------------------------------


def test_retry_after_uses_the_stated_time_and_is_clamped_by_max_delay() -> None:
    exact = RetryPolicy(max_delay_ms=5_000, jitter=False)
    assert retry_after_delay_ms(exact, 3) == 3_000
    assert retry_after_delay_ms(exact, 60) == 5_000
    jittered = RetryPolicy(max_delay_ms=5_000)
    rng = random.Random(3)
    for _ in range(100):
        assert 3_000 <= retry_after_delay_ms(jittered, 3, rng) <= 3_300
        assert retry_after_delay_ms(jittered, 60, rng) == 5_000


# -- is_final_attempt --------------------------------------------------------------------------


def test_is_final_attempt_is_attempt_at_or_past_the_ceiling() -> None:
    policy = RetryPolicy(attempts=3)
    assert [is_final_attempt(policy, a) for a in (1, 2, 3, 4)] == [False, False, True, True]
    assert is_final_attempt(RetryPolicy(attempts=1), 1) is True


# -- declaration refusals ----------------------------------------------------------------------


def test_retry_policy_reads_a_declaration() -> None:
    policy = retry_policy(
        {"attempts": 4, "backoff": "linear", "delay": "2s", "max_delay": "1m", "jitter": False, "dead_letter": False}
    )
    assert policy == RetryPolicy(
        attempts=4, backoff="linear", delay_ms=2000, max_delay_ms=60_000, jitter=False, dead_letter=False
    )


@pytest.mark.parametrize(
    ("declared", "field"),
    [
        ({"attempts": 0}, "retry.attempts"),
        ({"attempts": -1}, "retry.attempts"),
        ({"attempts": 1.5}, "retry.attempts"),
        ({"attempts": True}, "retry.attempts"),
        ({"attempts": math.nan}, "retry.attempts"),
        ({"attempts": "3"}, "retry.attempts"),
        ({"backoff": "quadratic"}, "retry.backoff"),
        ({"delay": "soon"}, "retry"),
        ({"delay": -1}, "retry.delay"),
        ({"max_delay": "1x"}, "retry"),
        ({"delay": "10s", "max_delay": "1s"}, "retry.max_delay"),
        ({"jitter": "yes"}, "retry.jitter"),
        ({"dead_letter": 0}, "retry.dead_letter"),
        ({"attempt": 3}, "retry"),
        ("3 times", "retry"),
        (3, "retry"),
        (RetryPolicy(attempts=0), "retry.attempts"),
        (RetryPolicy(delay_ms="1s"), "retry.delay"),  # type: ignore[arg-type]
    ],
)
def test_retry_policy_refuses_at_declaration(declared: object, field: str) -> None:
    with pytest.raises(UltimateError) as caught:
        retry_policy(declared, job="charge")  # type: ignore[arg-type]
    assert caught.value.code == "X_JOB_DECLARATION_INVALID"
    assert caught.value.meta == {"job": "charge", "field": field}
    assert "charge" in caught.value.message
