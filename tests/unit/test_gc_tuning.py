"""``jobs_worker``'s collector: collected, frozen and collected less often — checked in a fresh interpreter,
since the tuning changes the whole process."""

from __future__ import annotations

import json
import subprocess
import sys

from ultimate_jobs.runtime.gc_tuning import WORKER_GC_GEN0

PROBE = """
import gc, json
from ultimate_jobs.runtime.gc_tuning import tune_worker_gc
before = gc.get_threshold()
junk = []
junk.append(junk)  # a cycle nobody holds once dropped: the tuning's collection frees it, it is not frozen
del junk
answered = tune_worker_gc()
print(json.dumps({"before": before, "after": gc.get_threshold(), "answered": answered,
                  "frozen": gc.get_freeze_count()}))
"""


def test_the_worker_gc_tuning_freezes_the_booted_process_and_raises_only_the_young_threshold() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60)
    seen = json.loads(done.stdout)
    before, after = seen["before"], seen["after"]
    assert after == seen["answered"]
    assert after[0] == max(before[0], WORKER_GC_GEN0) and after[0] >= 50_000
    assert after[1:] == before[1:]  # the older generations keep Python's thresholds
    assert seen["frozen"] > 1_000  # the interpreter's and the package's objects: never walked again
