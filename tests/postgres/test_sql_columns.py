"""Rows are read by column name: every statement that answers a kind of row names its columns as the shared
decoders' field tuples do (``ultimate_jobs.drivers.sql.rows``), checked on the migrated schema through
``cursor.description``. The SQLite half runs the same check over its catalogue."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from ultimate_jobs.drivers.postgres.queries import backfills, operator, outbox, scheduler
from ultimate_jobs.drivers.sql.outbox import OUTBOX_FIELDS
from ultimate_jobs.drivers.sql.rows import BACKFILL_FIELDS, JOB_FIELDS, LEASE_FIELDS, STEP_FIELDS, WORKER_FIELDS

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

NO_ID = "00000000-0000-0000-0000-000000000000"

STATEMENTS = [
    (operator.SQL_GET_JOB, {"id": NO_ID}, JOB_FIELDS),
    (operator.SQL_JOB_STEPS, {"id": NO_ID}, STEP_FIELDS),
    (operator.SQL_WORKERS, {"now": 0, "window": 0}, WORKER_FIELDS),
    (scheduler.SQL_LEADER_CURRENT, {"name": "x"}, LEASE_FIELDS),
    (backfills.SQL_BACKFILL_LIST, {"name": None, "status": None, "limit": 1}, BACKFILL_FIELDS),
    (outbox.SQL_OUTBOX_CLAIM, {"limit": 1, "lease": 1, "claimant": "c", "now": 0}, OUTBOX_FIELDS),
]


def column_names(run: Callable[[str, Any], Sequence[Any]], statement: str, params: Any) -> tuple[str, ...]:
    """The names ``statement``'s answer gives its columns (``run`` executes it and answers the description)."""
    return tuple(column[0] for column in run(statement, params))


@pytest.mark.parametrize(("statement", "params", "fields"), STATEMENTS)
def test_each_statement_names_its_columns_as_the_decoder_reads_them(
    statement: str, params: dict[str, Any], fields: tuple[str, ...]
) -> None:
    from django.db import connection

    def run(sql: str, params: Any) -> Sequence[Any]:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.description

    assert column_names(run, statement, params) == fields
