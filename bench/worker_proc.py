"""One ultimate_jobs worker process, as ``manage.py jobs_worker --concurrency N`` builds it, speaking the
bench's READY/GO/COUNT protocol (:mod:`bench.common`): ``python -m bench.worker_proc --concurrency 16``.

It builds the worker from settings (``DJANGO_SETTINGS_MODULE=bench.settings``), opens its database
connection, prints ``READY``, waits for ``GO`` and then runs ``worker.run()`` until SIGTERM drains it.
``--count-statements`` counts every statement it sends (the idle figure's fallback method).
"""

from __future__ import annotations

import argparse
import os
import sys


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--count-statements", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")

    from bench.common import announce_ready_and_wait_for_go, count_statements

    if args.count_statements:
        count_statements()

    import django

    django.setup()
    from django.db import connection

    from ultimate_jobs.worker.boot import worker_from_settings

    worker = worker_from_settings(concurrency=args.concurrency)
    connection.ensure_connection()
    announce_ready_and_wait_for_go()
    worker.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
