"""The claim is planned once per connection. Postgres kept planning the prepared ``SQL_CLAIM`` again on every
run (its custom plan always looked cheaper than the generic one, which is costed for ten queues), and that
planning cost more than the claim itself; the executor sets ``plan_cache_mode`` to ``force_generic_plan`` on
the connection that claims — outside a transaction only, and never when the project chose its own
``prepare_threshold``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection, transaction

from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.testing import FrozenClock
from ultimate_jobs.testing.conformance_support import QUEUE, request

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

CLAIMS = 8


@pytest.fixture
def fresh_session() -> Iterator[None]:
    """A new server session for the test (nothing prepared, every setting at its default), closed after it."""
    connection.close()
    yield
    connection.close()


def claim_plans() -> tuple[int, int]:
    """How many times this session ran the prepared claim with its generic plan, and with a custom one."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE %s",
            ["%WITH registry AS%"],
        )
        rows = cursor.fetchall()
    assert len(rows) == 1, rows
    return rows[0]


def plan_cache_mode() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW plan_cache_mode")
        return str(cursor.fetchone()[0])


def claim_one_at_a_time(driver: PostgresDriver) -> None:
    driver.enqueue_many([request() for _ in range(CLAIMS)])
    for _ in range(CLAIMS):
        assert len(driver.claim(queues=[QUEUE], limit=1, worker_id="w1").jobs) == 1


def test_the_claim_is_planned_once_on_its_connection_and_not_again_on_every_run(fresh_session: None) -> None:
    claim_one_at_a_time(PostgresDriver(clock=FrozenClock()))

    assert claim_plans() == (CLAIMS, 0)
    assert plan_cache_mode() == "force_generic_plan"


def setting(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SHOW {name}")
        return str(cursor.fetchone()[0])


def test_the_claims_session_compiles_no_plan(fresh_session: None) -> None:
    """JIT is off where the claim runs: the fair claim's estimates over a large x_jobs cross jit_above_cost,
    and compiling its plan on every run took ~100 ms of a ~1 ms claim."""
    assert setting("jit") == "on"  # the server's default, as the project has it
    claim_one_at_a_time(PostgresDriver(clock=FrozenClock(), fair_queues=[QUEUE]))
    assert setting("jit") == "off"


def test_a_claim_inside_a_transaction_leaves_the_session_setting_alone(fresh_session: None) -> None:
    driver = PostgresDriver(clock=FrozenClock())
    with transaction.atomic():
        claim_one_at_a_time(driver)
        assert plan_cache_mode() == "auto"  # a SET here would go with a rollback, unseen by the executor
    assert plan_cache_mode() == "auto"

    driver.enqueue_many([request()])
    assert len(driver.claim(queues=[QUEUE], limit=1, worker_id="w1").jobs) == 1  # outside: now it is set
    assert plan_cache_mode() == "force_generic_plan"


def test_a_project_that_sets_prepare_threshold_keeps_its_session_as_it_is(fresh_session: None) -> None:
    options = connection.settings_dict.setdefault("OPTIONS", {})
    options["prepare_threshold"] = 2
    try:
        claim_one_at_a_time(PostgresDriver(clock=FrozenClock()))
        generic, custom = claim_plans()  # psycopg prepared it after its second run, as the project asked

        assert plan_cache_mode() == "auto"
        assert generic + custom == CLAIMS - 2
    finally:
        del options["prepare_threshold"]
