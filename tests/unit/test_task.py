"""``@task``: declaration refusals (cron, IANA tz, catch-up), the handle (entries, enqueue, describe),
the cron resolver across DST switch days, and the catch-up planner's bisection."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.conftest import JobsEnv
from ultimate_jobs import JobRun, TaskHandle, job, next_task_run, task
from ultimate_jobs.core.definition import JobHandle
from ultimate_jobs.errors import JobDuplicateError, JobNameTakenError, UltimateError, ValidationError
from ultimate_jobs.scheduler.catchup import latest_due, plan_fires
from ultimate_jobs.scheduler.cron import CronSchedule, from_ms, to_ms

HOUR = 3_600_000
HELSINKI = ZoneInfo("Europe/Helsinki")  # clocks move at 03:00 local: 03:00 is skipped, then repeated


def ms(*parts: int, tz: ZoneInfo | None = None) -> int:
    return to_ms(datetime(*parts, tzinfo=tz or UTC))  # type: ignore[misc]


def record_job(name: str = "record_tick") -> JobHandle[Any, Any]:
    def body(run: JobRun[Any]) -> None:
        return None

    body.__name__ = name
    return job(idempotency_key=lambda i: f"tick:{i['occurrence_ms']}", tenant="none")(body)


def declare(fn: Callable[[int], Any] | None = None, **options: Any) -> TaskHandle:
    options.setdefault("cron", "0 * * * *")
    options.setdefault("tz", "UTC")
    return task(**options)(fn or (lambda occurrence_ms: []))


# -- declaration --------------------------------------------------------------------------------


def test_the_task_name_is_the_function_name_unless_name_is_given(jobs: JobsEnv) -> None:
    def nightly_digest(occurrence_ms: int) -> list[Any]:
        return []

    handle = task(cron="0 3 * * *", tz="Europe/Paris")(nightly_digest)
    assert (handle.name, handle.kind, handle.explicit_name) == ("nightly_digest", "task", False)
    named = task(cron="0 3 * * *", tz="UTC", name="x.digest")(lambda occurrence_ms: [])
    assert (named.name, named.explicit_name) == ("x.digest", True)
    assert repr(handle) == "<TaskHandle nightly_digest cron='0 3 * * *' tz=Europe/Paris>"


@pytest.mark.parametrize("cron", ["", "   ", "61 * * * *", "bogus", "0 3 * *", "0 0 30 2 *", 42, None])
def test_a_cron_croniter_refuses_or_that_names_no_instant_is_refused_at_declaration(jobs: JobsEnv, cron: Any) -> None:
    with pytest.raises(UltimateError) as caught:
        declare(cron=cron)
    assert caught.value.code == "X_JOB_DECLARATION_INVALID"
    assert caught.value.meta["field"] == "cron"


def test_tz_is_required(jobs: JobsEnv) -> None:
    with pytest.raises(UltimateError) as caught:
        task(cron="0 3 * * *")(lambda occurrence_ms: [])  # type: ignore[call-arg]
    assert caught.value.code == "X_JOB_DECLARATION_INVALID"
    assert caught.value.meta["field"] == "tz"
    assert "timezone" in caught.value.message


@pytest.mark.parametrize("tz", ["Bogota", "bogota", "america/bogota", "", "UTC+5", "../etc/passwd", 5])
def test_a_tz_that_is_not_an_iana_zone_is_refused_not_run_in_utc(jobs: JobsEnv, tz: Any) -> None:
    with pytest.raises(UltimateError) as caught:
        declare(tz=tz)
    assert caught.value.code == "X_JOB_DECLARATION_INVALID"
    assert caught.value.meta["field"] == "tz"


def test_an_iana_zone_resolves_occurrences_in_that_zone(jobs: JobsEnv) -> None:
    bogota = declare(cron="0 3 * * *", tz="America/Bogota")  # UTC-5, no DST
    assert bogota.next_run(ms(2026, 1, 1)) == ms(2026, 1, 1, 8)
    assert next_task_run(bogota, ms(2026, 1, 1)) == ms(2026, 1, 1, 8)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("catch_up", "sometimes"),
        ("catch_up", None),
        ("max_catch_up", 0),
        ("max_catch_up", -1),
        ("max_catch_up", 1.5),
        ("max_catch_up", True),
        ("max_catch_up", float("nan")),
        ("max_catch_up", "10"),
    ],
)
def test_a_bad_catch_up_is_refused_at_declaration(jobs: JobsEnv, field: str, value: Any) -> None:
    with pytest.raises(UltimateError) as caught:
        declare(**{field: value})
    assert caught.value.code == "X_JOB_DECLARATION_INVALID"
    assert caught.value.meta["field"] == field


def test_unknown_options_names_and_bodies_are_refused(jobs: JobsEnv) -> None:
    with pytest.raises(UltimateError) as unknown:
        task(cron="0 3 * * *", tz="UTC", cadence="daily")  # type: ignore[call-arg]
    assert unknown.value.code == "X_JOB_DECLARATION_INVALID"
    with pytest.raises(UltimateError) as name:
        declare(name=" ")
    assert name.value.meta["field"] == "name"
    with pytest.raises(UltimateError) as body:
        task(cron="0 3 * * *", tz="UTC")(lambda a, b: [])  # type: ignore[arg-type]
    assert body.value.meta["field"] == "body"
    with pytest.raises(UltimateError) as not_callable:
        task(cron="0 3 * * *", tz="UTC")("nightly")  # type: ignore[arg-type]
    assert not_callable.value.code == "X_JOB_DECLARATION_INVALID"


def test_a_task_shares_the_name_space_of_jobs(jobs: JobsEnv) -> None:
    record_job("digest")
    with pytest.raises(JobDuplicateError) as collided:
        declare(name="digest")
    assert collided.value.code == "X_JOB_DUPLICATE"

    def sweep(occurrence_ms: int) -> list[Any]:
        return []

    def other_sweep(occurrence_ms: int) -> list[Any]:
        return []

    declare(sweep, name="x.sweep.hourly")
    declare(sweep, name="x.sweep.hourly")  # one declaration seen twice (autodiscovery and MODULES)
    with pytest.raises(JobNameTakenError) as taken:
        declare(other_sweep, name="x.sweep.hourly")
    assert taken.value.code == "X_JOB_DUPLICATE"


# -- the handle ---------------------------------------------------------------------------------


def test_entries_describe_and_enqueue(jobs: JobsEnv) -> None:
    tick = record_job()
    other = record_job("record_other")

    def fleet(occurrence_ms: int) -> list[tuple[JobHandle[Any, Any], Any]]:
        return [(tick, {"occurrence_ms": occurrence_ms}), (other, {"occurrence_ms": 1}), (tick, {"occurrence_ms": 2})]

    handle = declare(fleet, cron="*/5 * * * *", catch_up="run-all", max_catch_up=3)
    assert handle.entries(7) == [
        (tick, {"occurrence_ms": 7}),
        (other, {"occurrence_ms": 1}),
        (tick, {"occurrence_ms": 2}),
    ]
    described = handle.describe()
    assert described.as_dict() == {
        "kind": "task",
        "name": "fleet",
        "cron": "*/5 * * * *",
        "tz": "UTC",
        "catch_up": "run-all",
        "max_catch_up": 3,
        "jobs": ["record_tick", "record_other"],  # declaration order, each once
        "origin": handle.origin,
    }

    now = jobs.clock.now_ms()
    answers = handle.enqueue()  # every entry, now, with the job's own idempotency key
    assert len(answers) == 3 and not any(a.deduped for a in answers)
    rows = [jobs.driver.operator.get(a.id) for a in answers]
    assert [(r.name, r.idempotency_key) for r in rows if r] == [
        ("record_tick", f"tick:{now}"),
        ("record_other", "tick:1"),
        ("record_tick", "tick:2"),
    ]
    again = handle.enqueue()  # the same instant: the live keys answer
    assert [a.deduped for a in again] == [True, True, True]
    assert jobs.driver.operator.task_fires() == []  # a manual enqueue is not a scheduler fire


def test_a_body_that_does_not_answer_pairs_is_refused_where_it_is_read(jobs: JobsEnv) -> None:
    tick = record_job()

    def answering(answer: Any) -> Callable[[int], Any]:
        return lambda occurrence_ms: answer

    for index, answer in enumerate(("nope", None, [tick], [(tick,)], [("record_tick", {})], [(tick, {}, 1)])):
        handle = declare(answering(answer), name=f"bad-{index}")
        with pytest.raises(UltimateError) as caught:
            handle.entries(0)
        assert caught.value.code == "X_JOB_DECLARATION_INVALID"
        assert caught.value.meta == {"task": handle.name, "field": "body"}


def test_an_entry_input_the_job_refuses_is_refused_by_the_jobs_own_rules(jobs: JobsEnv) -> None:
    tick = record_job()
    handle = declare(lambda occurrence_ms: [(tick, "not a dict")])
    with pytest.raises(ValidationError):
        handle.enqueue()


# -- the resolver across DST switch days ----------------------------------------------------------


def local_days(schedule: CronSchedule, start: int, end: int) -> dict[date, list[str]]:
    seen: dict[date, list[str]] = {}
    at = start
    while (at := schedule.next_after(at)) < end:
        local = from_ms(at, schedule.zone)
        seen.setdefault(local.date(), []).append(local.strftime("%H:%M%z"))
    return seen


def test_0_3_in_a_dst_zone_runs_zero_times_on_the_spring_switch_day_and_twice_on_the_fall_one() -> None:
    schedule = CronSchedule("0 3 * * *", HELSINKI)
    spring = local_days(schedule, ms(2026, 3, 27), ms(2026, 3, 31))
    assert spring == {
        date(2026, 3, 27): ["03:00+0200"],
        date(2026, 3, 28): ["03:00+0200"],
        # 2026-03-29: 03:00 EET does not exist — the clocks jump to 04:00 EEST
        date(2026, 3, 30): ["03:00+0300"],
    }
    fall = local_days(schedule, ms(2026, 10, 22), ms(2026, 10, 27))
    assert fall[date(2026, 10, 25)] == ["03:00+0300", "03:00+0200"]  # the hour happens twice
    assert [len(v) for d, v in sorted(fall.items()) if d != date(2026, 10, 25)] == [1, 1, 1]


def test_an_hourly_cron_fires_once_per_real_hour_across_both_switches() -> None:
    schedule = CronSchedule("30 * * * *", HELSINKI)
    for start in (ms(2026, 3, 28, 20), ms(2026, 10, 24, 20)):
        instants, at = [], start
        for _ in range(10):
            at = schedule.next_after(at)
            instants.append(at)
        assert [b - a for a, b in itertools.pairwise(instants)] == [HOUR] * 9


def test_next_after_from_inside_the_repeated_hour_finds_its_second_pass() -> None:
    schedule = CronSchedule("0 3 * * *", HELSINKI)
    first_pass = ms(2026, 10, 25, 0)  # 03:00 EEST
    assert schedule.next_after(first_pass - 1) == first_pass
    assert schedule.next_after(first_pass) == first_pass + HOUR  # 03:00 EET, the second pass
    assert schedule.next_after(first_pass + 30 * 60_000) == first_pass + HOUR
    assert schedule.next_after(first_pass + HOUR) == ms(2026, 10, 26, 1)


# -- the catch-up planner -----------------------------------------------------------------------


class Counting:
    def __init__(self, inner: CronSchedule) -> None:
        self.inner, self.calls = inner, 0

    def next_after(self, after_ms: int) -> int:
        self.calls += 1
        return self.inner.next_after(after_ms)


def test_skip_finds_the_true_latest_occurrence_by_bisection_not_by_walking() -> None:
    minutely = Counting(CronSchedule("* * * * *", ZoneInfo("UTC")))
    start = ms(2026, 1, 1)
    three_hours = start + 3 * HOUR + 30_000
    assert latest_due(minutely, start, three_hours) == start + 3 * HOUR
    assert minutely.calls <= 30  # ~25 evaluations, not the 180 a walk would take
    minutely.calls = 0
    year = start + 365 * 86_400_000 + 59_000
    assert latest_due(minutely, start, year) == start + 365 * 86_400_000
    assert minutely.calls <= 40
    with pytest.raises(ValueError):
        latest_due(minutely, start, start + 59_999)  # nothing is due


def test_each_policy_plans_a_day_of_missed_hourly_occurrences_as_specified() -> None:
    hourly = CronSchedule("0 * * * *", ZoneInfo("UTC"))
    start, now = ms(2026, 1, 1), ms(2026, 1, 2, 0, 30)

    def plan(policy: Any, watermark: int = start) -> list[tuple[int, int]]:
        fires = plan_fires(hourly, policy=policy, max_catch_up=10, watermark_ms=watermark, now_ms=now)
        return [(f.occurrence_ms, f.watermark_ms) for f in fires]

    assert plan("skip") == [(ms(2026, 1, 2), ms(2026, 1, 2))]
    assert plan("run-once") == [(ms(2026, 1, 1, 1), ms(2026, 1, 2))]  # fires the earliest, passes the rest
    walked = plan("run-all")
    assert [o for o, _ in walked] == [ms(2026, 1, 1, h) for h in range(1, 11)]
    assert all(o == w for o, w in walked)
    assert plan("skip", watermark=ms(2026, 1, 2)) == []


def test_cron_task_is_the_same_declaration_under_a_name_not_mistaken_for_djangos() -> None:
    import ultimate_jobs

    assert ultimate_jobs.cron_task is task
    assert "cron_task" in ultimate_jobs.__all__
