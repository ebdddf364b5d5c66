"""Settings for ``test_settle_buffer_processes``: :mod:`tests.e2e.pg_settings` with the driver of
:mod:`tests.e2e.slow_ack` (a Postgres driver whose acks sleep ``UJ_ACK_DELAY_MS`` first)."""

from tests.e2e.pg_settings import *  # noqa: F403
from tests.e2e.pg_settings import ULTIMATE_JOBS as PG_JOBS

ULTIMATE_JOBS = {**PG_JOBS, "DRIVER": "tests.e2e.slow_ack.slow_ack_driver"}
