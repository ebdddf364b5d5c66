"""The task and jobs the scheduler/event process tests run in real processes (``ULTIMATE_JOBS['MODULES']``
of :mod:`tests.e2e.sched_settings`).

- ``every_second``: a ``* * * * * *`` task (croniter's seconds field), catch-up ``run-all``, each
  occurrence enqueueing one ``record_tick`` row keyed by the occurrence — so the rows ARE the fires,
  and a second fire of one occurrence would be a second row (or a deduped enqueue; the test reads the
  fires from the rows' creation times too).
- ``await_answer``: waits for ``e2e.answer`` matching its key (polling every 200 ms), then returns it.
"""

from __future__ import annotations

from typing import Any

from ultimate_jobs import JobRun, job, task

TICK_QUEUE = "e2e-sched"
EVENT_QUEUE = "e2e-events"


@job(idempotency_key=lambda i: f"{i['task']}:{i['occurrence_ms']}", tenant="none", queue=TICK_QUEUE)
def record_tick(run: JobRun[Any]) -> None:
    return None


@task(cron="* * * * * *", tz="UTC", catch_up="run-all", max_catch_up=100)
def every_second(occurrence_ms: int) -> list[tuple[Any, Any]]:
    return [(record_tick, {"task": "every_second", "occurrence_ms": occurrence_ms})]


@job(
    idempotency_key=lambda i: f"answer:{i['key']}",
    tenant="none",
    queue=EVENT_QUEUE,
    event_poll="200ms",
    retry={"attempts": 1},
)
def await_answer(run: JobRun[Any]) -> Any:
    return run.step.wait_for_event(
        "answer", "e2e.answer", match={"key": run.input["key"]}, timeout="60s", required=True
    )
