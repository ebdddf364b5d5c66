"""The worker process's garbage collector: frozen after boot, collected far less often.

A worker holds hundreds of runs in flight, each a few dozen small objects that live for the run's
length. With CPython's default thresholds (a young-generation pass every 700 net allocations) the
collector walks those live runs again and again — at 500 async runs in flight it cost as much CPU as
the runs themselves. An async run leaves no reference cycle behind (measured: an attempt drops the one
callback that would tie it to its flight's signal when it ends), so reference counting frees it and the
collector has little to find; what cyclic garbage there is waits at most 50,000 net allocations.
``jobs_worker`` therefore, once Django and the job modules are loaded:

- runs one full collection and freezes what survives (``gc.freeze()``): the settings, models and
  modules of a booted app are never walked again;
- raises the young generation's threshold to :data:`WORKER_GC_GEN0` (the older generations' keep
  Python's values), so a pass comes every 50,000 net allocations.

``ULTIMATE_JOBS["WORKER_GC"] = "python"`` leaves the collector as Python sets it.
"""

from __future__ import annotations

import gc

__all__ = ["WORKER_GC_GEN0", "tune_worker_gc"]

WORKER_GC_GEN0 = 50_000
"""The young generation's threshold in a worker process (Python's default is 700; 2,000 from 3.13)."""


def tune_worker_gc() -> tuple[int, int, int]:
    """Collect, freeze the survivors, and raise the young generation's threshold to at least
    :data:`WORKER_GC_GEN0`. Answers the thresholds now in force."""
    gc.collect()
    gc.freeze()
    gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(gen0, WORKER_GC_GEN0), gen1, gen2)
    return gc.get_threshold()
