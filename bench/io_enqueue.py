"""``python -m bench.io_enqueue BODY VARIANT N BATCH``: load one io drain's jobs (or, BODY ``steps``, the steps
case's ``run`` or ``atomic`` jobs) for ultimate_jobs — rows
``1..N`` of ``bench_rows``, one job each, through ``job_driver().enqueue_many`` ``BATCH`` at a time — under
``bench.settings_io``, in a process of its own so the bench process never registers the io jobs (its other
cases read the registry: ``jobs queues``, ``/metrics``).

Prints one JSON line, ``{"enqueued": N}``; exits 3 with the reason on stderr when this checkout cannot declare
the variant's body (an ``async def`` body refused by ``@job``).
"""

from __future__ import annotations

import os
import sys

UNAVAILABLE = 3


def main(argv: list[str]) -> int:
    body, variant, n, size = argv[0], argv[1], int(argv[2]), int(argv[3])
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings_io"
    import django

    django.setup()
    from bench import io_jobs
    from bench.common import emit
    from ultimate_jobs.core.installed import job_driver

    if variant == "async" and io_jobs.ASYNC_UNAVAILABLE is not None:
        print(io_jobs.ASYNC_UNAVAILABLE, file=sys.stderr)
        return UNAVAILABLE
    if body == "steps":  # the steps case: variant "run" or "atomic"
        handle = io_jobs.STEP_HANDLES[variant]
    else:
        handle = (io_jobs.ASYNC_HANDLES if variant == "async" else io_jobs.SYNC_HANDLES)[body]
    driver = job_driver()
    for start in range(1, n + 1, size):
        rows = range(start, min(start + size, n + 1))
        driver.enqueue_many([handle.build_request({"row": row}) for row in rows])
    emit({"enqueued": n})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
