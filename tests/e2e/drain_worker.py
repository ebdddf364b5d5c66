"""A real worker process for ``test_worker_drain``: one job that runs until the drain aborts it.

Run as ``python -m tests.e2e.drain_worker [--ignore-signal] [--drain-deadline 5s]`` from the
repository root. The job's body prints ``RUNNING`` once it holds the job, then waits on its signal
(or, with ``--ignore-signal``, never reads it); SIGTERM starts the worker's two-phase drain. After
``worker.run()`` returns the script prints one JSON line — the row's state and attempts and the
attempt's outcome — and exits 0. It uses the memory driver and never touches the database.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from typing import Any

QUEUE = "e2e-drain"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ignore-signal", action="store_true", help="a body that never reads run.signal")
    parser.add_argument("--drain-deadline", default="5s")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()

    from ultimate_jobs import JobRun, job
    from ultimate_jobs.core.installed import set_job_driver
    from ultimate_jobs.drivers.memory import MemoryDriver
    from ultimate_jobs.worker import job_worker

    driver = MemoryDriver()
    set_job_driver(driver)

    @job(name="e2e_drained", idempotency_key=lambda i: "e2e-drained", tenant="none", queue=QUEUE)
    def e2e_drained(run: JobRun[Any]) -> None:
        print("RUNNING", flush=True)
        if args.ignore_signal:
            threading.Event().wait()  # nothing can kill it; only the process exit ends it
        while not run.signal.wait(0.05):
            pass
        raise RuntimeError("the body stopped because its signal was aborted")

    job_id = e2e_drained.enqueue({}).id
    worker = job_worker(
        driver=driver, context=lambda: None, queues=[QUEUE], concurrency=1, drain_deadline=args.drain_deadline
    )
    worker.run()  # installs the SIGTERM/SIGINT handlers and blocks until the drain has finished

    record = driver.operator.get(job_id)
    report = {
        "job_id": job_id,
        "state": None if record is None else record.state,
        "attempts": None if record is None else record.attempts,
        "last_code": None if record is None else record.last_code,
        "outcome": worker.executions[-1].outcome if worker.executions else None,
        "worker_state": worker.state,
        "abandoned": worker.stats.abandoned,
    }
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
