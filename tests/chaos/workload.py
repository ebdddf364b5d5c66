"""The chaos suite's jobs (``ULTIMATE_JOBS['MODULES']`` of :mod:`tests.chaos.settings`; not named
``jobs.py``, so autodiscovery never declares them in the rest of the suite). Every step writes its side
effect to the ledger (:class:`tests.chaos.models.Effect`). A ``step.run`` commits it before its checkpoint
is stored, so a worker killed between the two leaves an effect without a checkpoint, and the step runs
again on the next attempt: a doubled effect, which at-least-once allows.

- ``chaos_steps``: steps ``one``, ``two``, ``three``; input ``{"key"}``.
- ``chaos_atomic``: the same three steps as transactional steps (``run.step.atomic``): each ledger row
  commits in the transaction that writes its checkpoint, so a kill leaves both or neither — never a
  doubled effect.
- ``chaos_order``: one step, ``confirm``; input ``{"number"}``, staged through the outbox by
  :mod:`tests.chaos.produce` in the transaction that writes the order.
"""

from __future__ import annotations

import os
from typing import Any

from ultimate_jobs import JobRun, job

from .models import Effect

QUEUE = "chaos"
ORDERS_QUEUE = "chaos-orders"
STEPS = ("one", "two", "three")
ATTEMPTS = 50  # a job is re-claimed once per kill that catches it; running out would bury it dead


def effect(run: JobRun[Any], step: str) -> int:
    """Write one ledger row for ``step`` of this run: committed at once (the slot's autocommit) in a
    ``step.run``, with the checkpoint in a ``step.atomic``."""
    return Effect.objects.create(job_id=run.job_id, step=step, worker_pid=os.getpid()).pk


@job(idempotency_key=lambda i: i["key"], tenant="none", queue=QUEUE, retry={"attempts": ATTEMPTS})
def chaos_steps(run: JobRun[Any]) -> None:
    for step in STEPS:
        run.step.run(step, lambda step=step: effect(run, step))


@job(idempotency_key=lambda i: i["key"], tenant="none", queue=QUEUE, retry={"attempts": ATTEMPTS})
def chaos_atomic(run: JobRun[Any]) -> None:
    for step in STEPS:
        run.step.atomic(step, lambda step=step: effect(run, step))


@job(idempotency_key=lambda i: i["number"], tenant="none", queue=ORDERS_QUEUE, retry={"attempts": ATTEMPTS})
def chaos_order(run: JobRun[Any]) -> None:
    run.step.run("confirm", lambda: effect(run, "confirm"))
