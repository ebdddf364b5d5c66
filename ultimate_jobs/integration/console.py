"""What the role commands print at the console when the app has not routed the ``ultimate_jobs`` logger.

One line per attempt outcome — time, outcome, job name, short id, duration, attempt n/m — and the
traceback under a failure; a row whose job the worker does not know is a loud ``UNKNOWN JOB`` line.
``--log-format json`` prints one JSON object per record instead; ``-v 2`` adds the debug events,
``--quiet`` (or ``-v 0``) keeps warnings and errors only.

>>> install_console(verbosity=1, log_format="text")   # what jobs_worker does at start
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, TextIO

from django.db import connections

from ..core.ids import short_id

if TYPE_CHECKING:
    from ..contracts.protocol import JobDriver

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")

_OUTCOME_EVENTS = {"jobs.job.completed", "jobs.attempt.failed", "jobs.job.suspended", "jobs.job.interrupted"}
_installed: logging.Handler | None = None


def _clock(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, tz=UTC).strftime("%H:%M:%S")


def _short(job_id: object) -> str:
    """A job id as a line shows it: its short form (:func:`~ultimate_jobs.core.ids.short_id`, the random
    end of the id — its start is the enqueue's millisecond, shared by every job of a burst), which ``jobs
    show``/``retry``/``cancel`` take."""
    return short_id(str(job_id))


def _duration(ms: object) -> str:
    if not isinstance(ms, int | float):
        return "-"
    return f"{ms:.0f} ms" if ms < 10_000 else f"{ms / 1000:.1f} s"


class ConsoleFormatter(logging.Formatter):
    """The text form: an outcome line per attempt, the traceback under a failure, ``event key=value``
    for everything else."""

    def format(self, record: logging.LogRecord) -> str:
        event = getattr(record, "event", None)
        fields: dict[str, Any] = dict(getattr(record, "jobs", None) or {})
        if event in _OUTCOME_EVENTS:
            return self._outcome(record, event, fields)
        if event == "jobs.job.unregistered":
            return (
                f"{_clock(record)} !! UNKNOWN JOB {fields.get('name')!r} (id {_short(fields.get('job_id'))}, "
                f"queue {fields.get('queue')}): no @job or Django task by that name is loaded in this worker — "
                f"{fields.get('fix')}; the row waits and is offered again in a minute"
            )
        text = f"{_clock(record)} {record.levelname.lower():<7} {record.getMessage()}"
        rest = " ".join(f"{k}={v}" for k, v in fields.items() if k not in ("traceback",))
        if rest:
            text = f"{text} {rest}"
        if record.exc_info:
            text = f"{text}\n{self.formatException(record.exc_info)}"
        return text

    def _outcome(self, record: logging.LogRecord, event: str, fields: dict[str, Any]) -> str:
        outcome = {
            "jobs.job.completed": "completed",
            "jobs.job.suspended": "suspended",
            "jobs.job.interrupted": "interrupted",
        }.get(event) or str(fields.get("outcome") or "failed")
        attempt = f"attempt {fields.get('attempt')}/{fields.get('max_attempts', '?')}"
        line = (
            f"{_clock(record)} {outcome:<13} {fields.get('name')} {_short(fields.get('job_id'))} "
            f"{_duration(fields.get('duration_ms'))} {attempt}"
        )
        if event == "jobs.attempt.failed":
            detail = fields.get("code") or fields.get("error")
            if outcome == "retried" and fields.get("retry_in_ms") is not None:
                line = f"{line} — retry in {_duration(fields['retry_in_ms'])}"
            line = f"{line}: {fields.get('error')}" if detail else line
            if fields.get("traceback"):
                line = f"{line}\n{_indent(str(fields['traceback']))}"
        elif event == "jobs.job.suspended":
            line = f"{line} (step {fields.get('step')!r})"
        return line


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines())


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``ts``, ``level``, ``event`` and the event's fields."""

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "event": getattr(record, "event", record.getMessage()),
            **(getattr(record, "jobs", None) or {}),
        }
        if record.exc_info:
            body["exc"] = self.formatException(record.exc_info)
        return json.dumps(body, default=str)


def level_for(verbosity: int) -> int:
    """``-v 0`` (``--quiet``) warnings and errors, ``-v 1`` (default) every outcome, ``-v 2``+ debug."""
    if verbosity <= 0:
        return logging.WARNING
    if verbosity == 1:
        return logging.INFO
    return logging.DEBUG


def app_routes_logs() -> bool:
    """True when the app sends log records somewhere already: a handler on ``ultimate_jobs`` (other than
    the library's own ``NullHandler``) or on the root logger (Django's default ``LOGGING`` sets none)."""
    ours = logging.getLogger("ultimate_jobs")
    own = [h for h in ours.handlers if not isinstance(h, logging.NullHandler) and h is not _installed]
    return bool(own) or bool(logging.getLogger().handlers)


def install_console(*, verbosity: int = 1, log_format: LogFormat = "text", stream: TextIO | None = None) -> bool:
    """Print the ``ultimate_jobs`` log at the console (stderr) for a role command. Text format steps
    aside when the app routes logs itself; ``--log-format json`` always installs. Answers whether it did."""
    global _installed
    logger = logging.getLogger("ultimate_jobs")
    if _installed is not None:
        logger.removeHandler(_installed)
        _installed = None
    if log_format == "text" and app_routes_logs():
        return False
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else ConsoleFormatter())
    logger.addHandler(handler)
    logger.setLevel(level_for(verbosity))
    _installed = handler
    return True


def database_text(alias: str = "default") -> str:
    """``alias (vendor name@host:port)`` for a start line; never the password."""
    settings_dict = connections[alias].settings_dict
    if connections[alias].vendor == "sqlite":
        return f"{alias} (sqlite {settings_dict.get('NAME')})"
    where = settings_dict.get("HOST") or "local socket"
    port = settings_dict.get("PORT")
    return f"{alias} ({connections[alias].vendor} {settings_dict.get('NAME')}@{where}{':' + str(port) if port else ''})"


def driver_text(driver: JobDriver) -> str:
    """``postgres on default (postgresql jobs@127.0.0.1:5432)`` — the driver and where its rows live."""
    name, alias = driver.name, driver.alias
    if alias is not None:
        return f"driver {name}, database {database_text(alias)}"
    if name == "memory":
        return "driver memory (jobs live in this process only — for tests; set ULTIMATE_JOBS['DRIVER'] = 'postgres')"
    return f"driver {name}"


def worker_start_line(worker: Any) -> str:
    """The worker's start line: its id, driver and database, and each queue with its slots (and its async
    slots, where it runs async jobs)."""

    def room(queue: str) -> str:
        async_slots = getattr(worker, "async_slots", {}).get(queue, 0)
        return f"{worker.slots.get(queue, 0)} slots" + (f", {async_slots} async" if async_slots else "")

    queues = ", ".join(f"{q} ({room(q)})" for q in worker.queues)
    return f"worker {worker.worker_id} serving {queues} — {driver_text(worker.driver)}"
