"""Test support: :class:`FrozenClock`, :func:`run_jobs`, and the driver conformance suite."""

from .clock import FrozenClock
from .runner import RunReport, run_jobs

__all__ = ["FrozenClock", "RunReport", "run_jobs"]
