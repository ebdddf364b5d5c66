"""The fairness case's jobs for ultimate_jobs: a no-op and a probe, each declaring its org (``input["org"]``) as
its tenant, which is what a fair queue serves in turn.

Imported under the fairness case's settings only (``bench.settings_fair``: ``ULTIMATE_JOBS["MODULES"]``): by its
worker processes and by ``python -m bench.fair_client``, which enqueues for it. Never by the bench process or
the other cases' workers, so their registries and the queues a worker without ``--queues`` serves stay as they
were. Both jobs are declared on ``bench_fair`` (named in ``FAIR_QUEUES``); the measurements with fairness off
enqueue the same jobs to ``bench_plain`` (``queue=``), which is not.
"""

from __future__ import annotations

from typing import Any

from bench.jobs import record_probe_start
from ultimate_jobs import JobRun, job

FAIR_QUEUE = "bench_fair"
PLAIN_QUEUE = "bench_plain"


def _org(i: dict[str, Any]) -> str:
    return str(i["org"])


@job(name="bench_org_noop", queue=FAIR_QUEUE, idempotency_key=lambda i: f"org-noop:{i['n']}", tenant=_org)
def bench_org_noop(run: JobRun[Any]) -> None:
    """Does nothing: one job of an org's backlog."""
    return None


@job(name="bench_org_probe", queue=FAIR_QUEUE, idempotency_key=lambda i: f"org-probe:{i['n']}", tenant=_org)
def bench_org_probe(run: JobRun[Any]) -> None:
    """Records its own start under its ``kind`` and ``n``, as ``bench_probe`` does."""
    record_probe_start(run)
