"""A relay process for ``test_outbox_processes``: ``python -m tests.e2e.outbox_relay [--stall before|after]
[--batch-size N] [--claim-lease 2s]`` with ``DJANGO_SETTINGS_MODULE=tests.e2e.pg_settings``.

It builds the relay as ``manage.py jobs_relay`` does (``relay_from_settings``), prints ``READY <relay id>``
once Django is set up and connected, and waits for ``GO`` on stdin, so two relays start together. Then
it runs until SIGTERM drains it — unless told to stall, for the test to SIGKILL it mid-pass:

- ``--stall before``: the first publish prints ``CLAIMED <n>`` and blocks before anything reaches the
  queue (the rows stay claimed under this relay's lease);
- ``--stall after``: the first publish reaches the queue, prints ``PUBLISHED <n>`` and blocks before the
  rows are marked published.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any


class Stalling:
    """The configured driver, stalling for good around its first publish."""

    def __init__(self, inner: Any, when: str) -> None:
        self.inner = inner
        self.name = inner.name
        self.when = when

    def enqueue_many(self, requests: Sequence[Any]) -> Any:
        if self.when == "before":
            print(f"CLAIMED {len(requests)}", flush=True)
            threading.Event().wait()
        answers = self.inner.enqueue_many(requests)
        print(f"PUBLISHED {len(requests)}", flush=True)
        threading.Event().wait()
        return answers


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stall", choices=("before", "after"))
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--claim-lease", default="30s")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.e2e.pg_settings")
    import django

    django.setup()
    from django.db import connection

    from ultimate_jobs.core.installed import job_driver
    from ultimate_jobs.outbox import relay_from_settings

    driver = Stalling(job_driver(), args.stall) if args.stall else job_driver()
    relay = relay_from_settings(batch_size=args.batch_size, claim_lease=args.claim_lease, driver=driver)  # type: ignore[arg-type]
    connection.ensure_connection()
    print(f"READY {relay.relay_id}", flush=True)
    if sys.stdin.readline().strip() != "GO":
        return 2
    relay.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
