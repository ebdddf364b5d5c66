"""Rows are read by column name on SQLite too: each statement that answers a kind of row names its columns
as the shared decoders' field tuples do (see tests/postgres/test_sql_columns.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from tests.postgres.test_sql_columns import column_names
from ultimate_jobs.drivers.sql.outbox import OUTBOX_FIELDS
from ultimate_jobs.drivers.sql.rows import BACKFILL_FIELDS, JOB_FIELDS, LEASE_FIELDS, STEP_FIELDS, WORKER_FIELDS
from ultimate_jobs.drivers.sqlite.queries import jobs, operator, outbox, stores

pytestmark = [pytest.mark.django_db]


@pytest.mark.parametrize(
    ("statement", "params", "fields"),
    [
        (operator.SQL_GET_JOB, {"id": "x"}, JOB_FIELDS),
        (jobs.SQL_CLAIM_TAKE, {"ids": "[]", "worker": "w", "lease": "", "now": ""}, JOB_FIELDS),
        (operator.SQL_JOB_STEPS, {"id": "x"}, STEP_FIELDS),
        (operator.SQL_WORKERS, {"cutoff": ""}, WORKER_FIELDS),
        (stores.SQL_LEADER_CURRENT, {"name": "x"}, LEASE_FIELDS),
        (stores.SQL_BACKFILL_LIST, {"name": None, "status": None, "limit": 1}, BACKFILL_FIELDS),
        (outbox.SQL_OUTBOX_STAMP, {"ids": "[]", "now": "", "claimant": "c"}, OUTBOX_FIELDS),
    ],
)
def test_each_statement_names_its_columns_as_the_decoder_reads_them(
    statement: str, params: dict[str, Any], fields: tuple[str, ...]
) -> None:
    from django.db import connection

    def run(sql: str, params: Any) -> Sequence[Any]:
        connection.ensure_connection()
        return connection.connection.execute(sql, params).description  # type: ignore[no-any-return]

    assert column_names(run, statement, params) == fields
