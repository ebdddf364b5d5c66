"""A second enqueuing process for ``test_postgres_processes``: the idempotency race.

Run as ``python -m tests.e2e.pg_enqueue <lock>`` with ``DJANGO_SETTINGS_MODULE=tests.e2e.pg_settings``.
It prints ``READY`` once Django is set up, then for every key read from stdin: waits on the shared
advisory lock ``<lock>`` (the parent holds it exclusively until both racers are queued behind it, so
they are released together), enqueues ``record_effect`` under that key through the configured
(Postgres) driver, and prints one JSON line ``{"key", "id", "run_id", "deduped"}``.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    lock = int(sys.argv[1])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.e2e.pg_settings")
    import django

    django.setup()

    from django.db import connection

    from tests.e2e.pg_jobs import record_effect

    print("READY", flush=True)
    for line in sys.stdin:
        key = line.strip()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock_shared(%s)", [lock])
            cursor.execute("SELECT pg_advisory_unlock_shared(%s)", [lock])
        answer = record_effect.enqueue({"key": key})
        print(json.dumps({"key": key, "id": answer.id, "run_id": answer.run_id, "deduped": answer.deduped}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
