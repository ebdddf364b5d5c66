"""Structured logging: the event name (``jobs.job.completed``, …) IS the log message; job facts ride in ``extra``."""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("ultimate_jobs")
logger.addHandler(logging.NullHandler())  # a library logs; the app decides where it goes


def log_event(level: int, event: str, /, *, exc_info: bool = False, **fields: Any) -> None:
    """Log ``event`` (e.g. ``jobs.lease.lost``) as the message, with ``fields`` in ``record.jobs``.

    A log query on the event name finds every one; a formatter prints ``%(jobs)s`` for the facts.
    """
    if logger.isEnabledFor(level):
        logger.log(level, event, extra={"event": event, "jobs": fields}, exc_info=exc_info)
