"""``settings.ULTIMATE_JOBS``: typed defaults, validation, and the process-wide driver and clock."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from .clock import Clock, system_clock
from .drivers.base import JobDriver
from .durations import parse_duration
from .errors import DriverUnavailableError, InvariantError

DRIVERS = ("postgres", "redis", "memory")
OUTBOX_MODES = ("optional", "required", "off")
KNOWN_KEYS = {
    "DRIVER",
    "DATABASE",
    "REDIS_URL",
    "QUEUES",
    "OUTBOX",
    "CONTEXT",
    "LIMITS",
    "DRAIN_DEADLINE",
    "ENVIRONMENT",
    "MODULES",
    "VISIBILITY_TIMEOUT",
    "METRICS_PUBLIC",
    "METRICS_TOKEN",
}


@dataclass(frozen=True, slots=True)
class JobsSettings:
    """The resolved ``ULTIMATE_JOBS`` dict. Every key is optional."""

    driver: str = "postgres"
    database: str = "default"
    redis_url: str = "redis://127.0.0.1:6379/0"
    queues: dict[str, int] = field(default_factory=dict)
    outbox: str = "optional"
    context: str | None = None
    limits: dict[str, Any] = field(default_factory=dict)
    drain_deadline_ms: int = 25_000
    environment: str = "production"
    modules: tuple[str, ...] = ()
    visibility_timeout_ms: int = 30_000
    metrics_public: bool = False
    metrics_token: str | None = None


def jobs_settings() -> JobsSettings:
    """Read and validate ``settings.ULTIMATE_JOBS``; a bad key is ``X_INVARIANT`` naming it."""
    raw: dict[str, Any] = dict(getattr(settings, "ULTIMATE_JOBS", {}) or {})
    unknown = set(raw) - KNOWN_KEYS
    if unknown:
        raise InvariantError(
            f"ULTIMATE_JOBS has unknown keys {sorted(unknown)}; known: {sorted(KNOWN_KEYS)}", {"keys": sorted(unknown)}
        )
    driver = raw.get("DRIVER", "postgres")
    if not isinstance(driver, str) or (driver not in DRIVERS and "." not in driver):
        raise InvariantError(f"ULTIMATE_JOBS['DRIVER'] = {driver!r}; use one of {DRIVERS} or a dotted path", {})
    outbox = raw.get("OUTBOX", "optional")
    if outbox not in OUTBOX_MODES:
        raise InvariantError(f"ULTIMATE_JOBS['OUTBOX'] = {outbox!r}; use one of {OUTBOX_MODES}", {})
    queues = raw.get("QUEUES", {})
    if not isinstance(queues, dict) or any(
        not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, int) or v < 1 for k, v in queues.items()
    ):
        raise InvariantError("ULTIMATE_JOBS['QUEUES'] must map queue names to slot counts >= 1", {})
    modules = raw.get("MODULES", ())
    if isinstance(modules, str) or not all(isinstance(m, str) for m in modules):
        raise InvariantError("ULTIMATE_JOBS['MODULES'] must be a list of module paths", {})
    metrics_public, metrics_token = _metrics_access(raw)
    return JobsSettings(
        driver=driver,
        database=str(raw.get("DATABASE", "default")),
        redis_url=str(raw.get("REDIS_URL", "redis://127.0.0.1:6379/0")),
        queues=dict(queues),
        outbox=outbox,
        context=raw.get("CONTEXT"),
        limits=dict(raw.get("LIMITS", {}) or {}),
        drain_deadline_ms=parse_duration(raw.get("DRAIN_DEADLINE", "25s"), field="ULTIMATE_JOBS['DRAIN_DEADLINE']"),
        environment=str(raw.get("ENVIRONMENT", "production")),
        modules=tuple(modules),
        visibility_timeout_ms=parse_duration(
            raw.get("VISIBILITY_TIMEOUT", "30s"), field="ULTIMATE_JOBS['VISIBILITY_TIMEOUT']"
        ),
        metrics_public=metrics_public,
        metrics_token=metrics_token,
    )


def _metrics_access(raw: dict[str, Any]) -> tuple[bool, str | None]:
    """``METRICS_PUBLIC`` (a bool, default False: staff only) and ``METRICS_TOKEN`` (a bearer token for a
    scraper, default none) — one or the other, so a token never looks like it guards a public view."""
    public = raw.get("METRICS_PUBLIC", False)
    if not isinstance(public, bool):
        raise InvariantError(f"ULTIMATE_JOBS['METRICS_PUBLIC'] = {public!r}; use True or False", {})
    token = raw.get("METRICS_TOKEN")
    if token is not None and (not isinstance(token, str) or not token.strip()):
        raise InvariantError("ULTIMATE_JOBS['METRICS_TOKEN'] must be a non-empty string (or None for no token)", {})
    if public and token is not None:
        raise InvariantError(
            "ULTIMATE_JOBS sets both METRICS_PUBLIC and METRICS_TOKEN; a public view ignores the token — "
            "drop one of them",
            {},
        )
    return public, token


_lock = threading.Lock()
_driver: JobDriver | None = None
_clock: Clock | None = None


def build_driver(config: JobsSettings | None = None) -> JobDriver:
    """Build the driver ``ULTIMATE_JOBS['DRIVER']`` names."""
    config = config or jobs_settings()
    if config.driver == "memory":
        from .drivers.memory import MemoryDriver

        return MemoryDriver(clock=job_clock())
    if config.driver == "postgres":
        from .drivers.postgres.driver import PostgresDriver

        return PostgresDriver(
            alias=config.database, clock=job_clock(), visibility_timeout_ms=config.visibility_timeout_ms
        )
    if config.driver == "redis":
        raise DriverUnavailableError(
            f"the {config.driver!r} driver is not part of this build yet; set ULTIMATE_JOBS['DRIVER'] = 'memory' "
            "or install a driver with set_job_driver()",
            {"driver": config.driver},
        )
    factory = import_string(config.driver)
    built: JobDriver = factory()
    return built


def job_driver() -> JobDriver:
    """The process's driver, built from settings on first use; ``X_DRIVER_UNAVAILABLE`` when none can be."""
    global _driver
    with _lock:
        if _driver is None:
            _driver = build_driver()
        return _driver


def set_job_driver(driver: JobDriver | None) -> None:
    """Install ``driver`` for every later enqueue and worker (``None`` rebuilds from settings)."""
    global _driver
    with _lock:
        _driver = driver


def job_clock() -> Clock:
    """The clock every time read goes through (the frozen clock under ``run_jobs``)."""
    return _clock or system_clock()


def set_job_clock(clock: Clock | None) -> None:
    """Install ``clock`` process-wide (``None`` restores the wall clock)."""
    global _clock
    _clock = clock
