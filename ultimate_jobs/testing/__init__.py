"""Test support: :class:`FrozenClock`, :func:`run_jobs`, :class:`JobsTestCase` and the ``jobs_queue``
fixture (:mod:`ultimate_jobs.testing.django`), and the driver conformance suite."""

from .clock import FrozenClock
from .django import JobsQueue, JobsTestCase
from .runner import RunReport, run_jobs

__all__ = ["FrozenClock", "JobsQueue", "JobsTestCase", "RunReport", "run_jobs"]
