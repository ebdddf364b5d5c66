"""What only the Redis driver has: done rows expiring on its clock, one hash-tag slot for every key,
scripts called by SHA that survive a flushed script cache, the stream wake, prefixes, the errors
of a bad construction or an unreachable server, and the refusal of a transactional step."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from tests.conftest import installed
from tests.redis_db import redis_test_url
from ultimate_jobs import JobRun, job
from ultimate_jobs.contracts.jobs import NackOptions, StepRecord
from ultimate_jobs.drivers.redis import DONE_TTL_MS, RedisDriver
from ultimate_jobs.drivers.redis.driver import client_from_url
from ultimate_jobs.testing import FrozenClock, run_jobs
from ultimate_jobs.testing.conformance import QUEUE, claim, claim_one, enqueue_finished, raises_code, request


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock()


@pytest.fixture
def driver(redis_client: redis.Redis, clock: FrozenClock) -> RedisDriver:
    return RedisDriver(redis_client, clock=clock, done_ttl_ms=60_000)


def test_a_done_row_and_its_steps_expire_after_done_ttl_on_the_drivers_clock(
    driver: RedisDriver, clock: FrozenClock
) -> None:
    driver.enqueue(request(key="done"))
    job = claim_one(driver)
    assert driver.save_step(job.id, job.ref, StepRecord(name="s", seq=1, status="done", output=1))
    assert driver.ack(job.id, job.ref)
    dead = enqueue_finished(driver, request(key="dead"), "dead")
    failed = enqueue_finished(driver, request(key="failed"), "failed")
    clock.advance(59_999)
    claim(driver)  # the next settle or claim reaps what expired
    assert driver.operator.get(job.id) is not None
    clock.advance(1)
    claim(driver)
    assert driver.operator.get(job.id) is None and driver.operator.steps(job.id) == []
    assert driver.operator.get(dead) is not None and driver.operator.get(failed) is not None
    assert not driver.client.exists(driver.key("job", job.id), driver.key("steps", job.id))


def test_done_ttl_zero_keeps_done_rows(redis_client: redis.Redis, clock: FrozenClock) -> None:
    driver = RedisDriver(redis_client, clock=clock, done_ttl_ms=0)
    done = enqueue_finished(driver, request())
    clock.advance(365 * 86_400_000)
    claim(driver)
    assert driver.operator.get(done) is not None


def test_the_default_done_ttl_is_a_week(redis_client: redis.Redis) -> None:
    assert RedisDriver(redis_client).done_ttl_ms == DONE_TTL_MS == 7 * 86_400_000


def test_every_key_of_a_store_is_in_one_cluster_slot(driver: RedisDriver, clock: FrozenClock) -> None:
    driver.enqueue_many([request(queue="a"), request(queue="b", tenant_id="t"), request(key="later")])
    job = claim_one(driver, queues=("a",))
    driver.save_step(job.id, job.ref, StepRecord(name="s", seq=1, status="done"))
    driver.nack(job.id, job.ref, NackOptions(error="boom", dead_letter=True))
    driver.operator.pause_queue("b")
    driver.leases.acquire("k", "h", limit=1, ttl_ms=1_000)
    driver.rates.take("api", "h", interval_ms=100, now_ms=clock.now_ms())
    driver.rates.take("api", "h2", interval_ms=100, now_ms=clock.now_ms())  # a reservation
    driver.leader.acquire("scheduler", "me", ttl_ms=1_000, now_ms=clock.now_ms())
    keys = driver.client.keys("*")
    assert len(keys) > 10 and all(k.startswith("{x}:") for k in keys)
    assert {key_slot(k.encode()) for k in keys} == {key_slot(b"{x}")}


def test_two_prefixes_are_two_stores(redis_client: redis.Redis, clock: FrozenClock) -> None:
    one = RedisDriver(redis_client, prefix="one", clock=clock)
    two = RedisDriver(redis_client, prefix="two", clock=clock)
    one.enqueue(request(key="k"))
    assert not two.enqueue(request(key="k")).deduped
    assert claim(two) and claim(one)
    assert {key_slot(k.encode()) for k in redis_client.keys("{two}*")} == {key_slot(b"{two}")}


def test_scripts_run_by_sha_and_reload_into_a_flushed_script_cache(driver: RedisDriver) -> None:
    driver.enqueue(request())
    driver.client.script_flush()  # what a restarted server without the cache looks like
    assert claim_one(driver).queue == QUEUE
    assert all(driver.client.script_exists(s.sha)[0] for name, s in driver._scripts.items() if name == "claim")


def test_a_client_without_decoded_responses_works(clock: FrozenClock, redis_client: redis.Redis) -> None:
    raw = redis.Redis.from_url(redis_test_url())  # bytes replies
    driver = RedisDriver(raw, clock=clock)
    job_id = driver.enqueue(request(input={"n": "é"})).id
    assert claim_one(driver).input == {"n": "é"}
    assert driver.operator.get(job_id) is not None
    raw.close()


@pytest.mark.parametrize("prefix", ["", "a{b", "c}"])
def test_a_prefix_that_cannot_be_a_hash_tag_is_refused(redis_client: redis.Redis, prefix: str) -> None:
    with raises_code("X_INVARIANT") as info:
        RedisDriver(redis_client, prefix=prefix)
    assert "hash tag" in str(info.value)


@pytest.mark.parametrize("ttl", [-1, 1.5, True])
def test_a_bad_done_ttl_is_refused(redis_client: redis.Redis, ttl: object) -> None:
    with raises_code("X_INVARIANT"):
        RedisDriver(redis_client, done_ttl_ms=ttl)  # type: ignore[arg-type]


def test_an_unreachable_server_is_driver_unavailable_naming_redis_url(clock: FrozenClock) -> None:
    driver = RedisDriver(client_from_url("redis://127.0.0.1:1/0"), clock=clock)
    with raises_code("X_DRIVER_UNAVAILABLE") as info:
        driver.enqueue(request())
    assert "REDIS_URL" in str(info.value)
    with raises_code("X_DRIVER_UNAVAILABLE"):
        driver.operator.get("nothing")


def test_the_wake_hears_another_process_enqueue_at_once(redis_client: redis.Redis) -> None:
    listening = RedisDriver(client_from_url(redis_test_url()))
    heard: list[str] = []
    arrived = threading.Event()

    def hear(queue: str) -> None:
        heard.append(queue)
        arrived.set()

    unsubscribe = listening.subscribe(hear)
    try:
        deadline = time.monotonic() + 5
        while not listening.wake_is_live() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert listening.wake_is_live()
        time.sleep(0.1)  # the reader is blocked on the stream
        other = RedisDriver(client_from_url(redis_test_url()))
        other.enqueue(request(queue="later", run_at_ms=other.clock.now_ms() + 60_000))  # not due: silent
        sent = time.monotonic()
        other.enqueue(request(queue="now"))
        assert arrived.wait(2.0)
        assert time.monotonic() - sent < 0.5
        assert heard == ["now"]
    finally:
        stopping = time.monotonic()
        unsubscribe()
        assert time.monotonic() - stopping < 2.0, "the blocked read did not end at once"
    assert not listening.wake_is_live()


def test_the_settings_factory_connects_the_driver_to_the_settings_redis_url(
    clock: FrozenClock, redis_client: redis.Redis
) -> None:
    from django.test import override_settings

    from ultimate_jobs.conf import build_driver

    config = {"DRIVER": "redis", "REDIS_URL": redis_test_url(), "VISIBILITY_TIMEOUT": "45s"}
    with override_settings(ULTIMATE_JOBS=config):
        driver = build_driver()
    assert isinstance(driver, RedisDriver) and driver.visibility_timeout_ms == 45_000
    job_id = driver.enqueue(request()).id
    assert RedisDriver(redis_client, clock=clock).operator.get(job_id) is not None


def test_the_driver_reads_no_settings(clock: FrozenClock, redis_client: redis.Redis) -> None:
    """Whatever ``ULTIMATE_JOBS`` says — here a REDIS_URL that is no URL — a driver built from a client
    works: only the factory that builds drivers from settings reads them, and it refuses the value."""
    from django.test import override_settings

    from ultimate_jobs.conf import build_driver

    with override_settings(ULTIMATE_JOBS={"DRIVER": "redis", "REDIS_URL": 42}):
        driver = RedisDriver(redis_client, clock=clock)
        assert driver.operator.get(driver.enqueue(request()).id) is not None
        with raises_code("X_INVARIANT"):
            build_driver()
    with pytest.raises(TypeError):
        RedisDriver()  # type: ignore[call-arg]  # no client: from_url(url) builds one


def test_step_atomic_is_refused_before_its_function_runs(driver: RedisDriver, clock: FrozenClock) -> None:
    """The Redis driver keeps its jobs outside Django's databases: no transaction can hold a step's writes
    with its checkpoint, so ``run.step.atomic`` is refused, terminally, naming the fix."""
    ran: list[int] = []
    with installed(clock, driver):

        @job(name="pay_on_redis", idempotency_key=lambda i: "k", tenant="none", retry={"attempts": 3})
        def pay(run: JobRun[Any]) -> None:
            run.step.atomic("mark-paid", lambda: ran.append(1))

        queued = pay.enqueue({})
        run_jobs(clock=clock)
    found = driver.operator.get(queued.id)
    assert found is not None and (found.state, found.attempts) == ("dead", 1)
    assert found.last_code == "X_STEP_ATOMIC_UNSUPPORTED" and "'redis' driver" in found.last_error
    assert ran == [] and driver.operator.steps(queued.id) == []


def test_a_fair_claim_over_thousands_of_lanes_serves_each_lane_once_before_any_twice(
    redis_client: redis.Redis, clock: FrozenClock
) -> None:
    """2,000 orgs with one job each and a noisy org with 500: every claim hands out its whole limit, and the
    rotation reaches every org once before it serves any twice (the noisy org included)."""
    driver = RedisDriver(redis_client, clock=clock, fair_queues=[QUEUE])
    quiet = [request(tenant_id=f"org-{n}") for n in range(2_000)]
    driver.enqueue_many(quiet + [request(tenant_id="noisy") for _ in range(500)])
    served: list[str | None] = []
    for _ in range(250):  # 2,500 jobs, 10 a claim
        jobs = claim(driver, limit=10)
        assert len(jobs) == 10
        served += [job.tenant_id for job in jobs]
        clock.advance(1)
    assert claim(driver) == []
    first_turns = served[:2_001]  # 2,001 lanes: every one's first turn, in the first 2,001 jobs handed out
    assert len(set(first_turns)) == 2_001
    assert served.count("noisy") == 500 and set(served[2_001:]) == {"noisy"}
