"""``manage.py jobs_dev``: every role in one process, for development (the worker, for now)."""

from __future__ import annotations

from .jobs_worker import Command as WorkerCommand


class Command(WorkerCommand):
    help = "Run every background role in one process for development; SIGTERM drains it."
