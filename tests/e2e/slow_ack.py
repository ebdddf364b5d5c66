"""A test-only driver factory for ``ULTIMATE_JOBS["DRIVER"]`` (a dotted path): the Postgres driver
whose ``ack_many`` — every settle a worker's settle buffer sends — first sleeps ``UJ_ACK_DELAY_MS``
(default 300 ms), so a worker process surely holds completions that have not landed yet."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from ultimate_jobs.conf import jobs_settings
from ultimate_jobs.contracts.jobs import Ack
from ultimate_jobs.core.installed import job_clock
from ultimate_jobs.drivers.postgres.driver import PostgresDriver

ACK_DELAY_ENV = "UJ_ACK_DELAY_MS"


class SlowAckDriver(PostgresDriver):
    """``PostgresDriver`` with ``delay_s`` before every batched ack."""

    def __init__(self, *, delay_s: float, **options: object) -> None:
        super().__init__(**options)  # type: ignore[arg-type]
        self.delay_s = delay_s

    def ack_many(self, acks: Sequence[Ack]) -> frozenset[str]:
        time.sleep(self.delay_s)
        return super().ack_many(acks)


def slow_ack_driver() -> SlowAckDriver:
    """What ``build_driver()`` calls: the settings' database and visibility timeout, the env's delay."""
    config = jobs_settings()
    return SlowAckDriver(
        delay_s=int(os.environ.get(ACK_DELAY_ENV, "300")) / 1000,
        alias=config.database,
        clock=job_clock(),
        visibility_timeout_ms=config.visibility_timeout_ms,
    )
