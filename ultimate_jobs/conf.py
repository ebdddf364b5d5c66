"""``settings.ULTIMATE_JOBS``: one reader per key (its type, its default, its refusal), and the
process-wide driver and clock.

Every key is read here and nowhere else; :func:`read_settings` runs every reader at once for the system
check (:mod:`ultimate_jobs.checks`), :func:`jobs_settings` raises the first refusal where a setting is
used. ``DRIVER`` unset follows the database: ``postgres`` on a PostgreSQL ``DATABASE`` alias, ``sqlite`` on
an SQLite one (:func:`resolve_driver`). ``REDIS_URL`` is the server the Redis driver (``DRIVER = "redis"``)
connects to. ``ENVIRONMENT`` is what a backfill's ``environments=`` are matched against.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from difflib import get_close_matches
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import connections
from django.utils.module_loading import import_string

from .contracts.events import EventBus
from .contracts.jobs import JobState
from .contracts.protocol import JobDriver
from .core.durations import parse_duration
from .core.installed import job_clock, register_builders
from .core.outcomes import no_context
from .defaults import (
    DEFAULT_DRAIN_DEADLINE_MS,
    DEFAULT_REDIS_URL,
    DEFAULT_VISIBILITY_TIMEOUT_MS,
    MAX_ASYNC_CONCURRENCY,
    PURGE_BATCH,
)
from .errors import DriverUnavailableError, InvariantError, UltimateError
from .guards.limits import LimitConfig
from .guards.sync_only import refuse_async
from .runtime.async_lane import EVENT_LOOPS

DRIVERS = ("postgres", "sqlite", "redis", "memory")
DRIVER_FOR_VENDOR = {"postgresql": "postgres", "sqlite": "sqlite"}
"""The driver an unset ``DRIVER`` resolves to, by the vendor of the ``DATABASE`` alias."""
OUTBOX_MODES = ("optional", "required", "off")

# The system-check ids (``ultimate_jobs.<id>``) a value that cannot be read reports under.
CHECK_KEY_UNKNOWN = "X_SETTINGS_KEY_UNKNOWN"
CHECK_VALUE_INVALID = "X_SETTINGS_VALUE_INVALID"
CHECK_DRIVER_UNKNOWN = "X_SETTINGS_DRIVER_UNKNOWN"
CHECK_LIMITS_INVALID = "X_SETTINGS_LIMITS_INVALID"
CHECK_REDIS_URL_INVALID = "X_SETTINGS_REDIS_URL_INVALID"
CHECK_ENVIRONMENT_INVALID = "X_SETTINGS_ENVIRONMENT_INVALID"

_DOTTED_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+", re.ASCII)  # module.attribute
_MODULE_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*", re.ASCII)
_ENVIRONMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", re.ASCII)
_REDIS_URL_FIX = "write redis://[[user]:password@]host[:port][/db], rediss://… for TLS, or unix:///path/to/redis.sock"


def _shown(value: object) -> str:
    """A value as a message quotes it: its repr, cut at 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


class SettingError(InvariantError):
    """A value of ``settings.ULTIMATE_JOBS`` that cannot mean anything: ``X_INVARIANT`` where the setting is
    read, and the system-check Error ``ultimate_jobs.<check>`` at ``manage.py check``. ``problem`` says
    what is wrong, ``fix`` what to write instead."""

    def __init__(self, key: object, check: str, problem: str, fix: str) -> None:
        where = f"ULTIMATE_JOBS[{key!r}]" if key is not None else "settings.ULTIMATE_JOBS"
        super().__init__(f"{where} {problem}; {fix}", {"key": key, "check": check})
        self.key = key
        self.check = check
        self.problem = f"{where} {problem}"
        self.fix = fix


DAY_MS = 86_400_000
RETENTION_KEYS = ("DONE", "FAILED", "CANCELLED", "DEAD", "OUTBOX", "BATCH")
MAX_RETENTION_BATCH = 100_000
_RETENTION_FIX = (
    "write e.g. {'DONE': '7d', 'FAILED': '30d', 'CANCELLED': '30d', 'DEAD': '30d', 'OUTBOX': '7d', 'BATCH': 1000}: "
    "each a duration of at least 1s (or None to keep those rows forever), BATCH a row count of 1 to 100000"
)


@dataclass(frozen=True, slots=True)
class Retention:
    """``ULTIMATE_JOBS["RETENTION"]``: how long the app's sweep keeps finished rows of each end state and
    published outbox rows (``None``: forever), and how many rows one delete removes at most."""

    done_ms: int | None = 7 * DAY_MS
    failed_ms: int | None = 30 * DAY_MS
    cancelled_ms: int | None = 30 * DAY_MS
    dead_ms: int | None = 30 * DAY_MS
    outbox_ms: int | None = 7 * DAY_MS
    batch: int = PURGE_BATCH

    def finished(self) -> dict[JobState, int | None]:
        """The retention of each finished state."""
        return {"done": self.done_ms, "failed": self.failed_ms, "cancelled": self.cancelled_ms, "dead": self.dead_ms}


@dataclass(frozen=True, slots=True)
class JobsSettings:
    """The resolved ``ULTIMATE_JOBS`` dict. Every key is optional; a key left out is its field's default
    here, the one place each default is written."""

    driver: str = "postgres"
    database: str = "default"
    redis_url: str = DEFAULT_REDIS_URL
    queues: dict[str, int] = field(default_factory=dict)
    fair_queues: frozenset[str] = frozenset()
    async_concurrency: dict[str, int] = field(default_factory=dict)
    outbox: str = "off"
    context: str | None = None
    limits: LimitConfig = field(default_factory=LimitConfig)
    drain_deadline_ms: int = DEFAULT_DRAIN_DEADLINE_MS
    environment: str = "production"
    modules: tuple[str, ...] = ()
    visibility_timeout_ms: int = DEFAULT_VISIBILITY_TIMEOUT_MS
    metrics_public: bool = False
    metrics_token: str | None = None
    retention: Retention = field(default_factory=Retention)
    worker_gc: str = "tuned"
    event_loop: str = "auto"
    prepared_statements: bool = True


def _read_driver(value: object) -> str:
    if isinstance(value, str) and (value in DRIVERS or _DOTTED_PATH.fullmatch(value)):
        return value
    raise SettingError(
        "DRIVER", CHECK_DRIVER_UNKNOWN, f"= {_shown(value)} names no driver", f"use one of {DRIVERS} or a dotted path"
    )


def _read_database(value: object) -> str:
    if isinstance(value, str) and value:
        return value
    raise SettingError(
        "DATABASE", CHECK_VALUE_INVALID, f"= {_shown(value)} is no alias", "name an alias of settings.DATABASES"
    )


def _read_redis_url(value: object) -> str:
    """The URL's shape only: the Redis driver connects to it when it is built."""
    if not isinstance(value, str) or not value or any(c.isspace() or not c.isprintable() for c in value):
        raise SettingError("REDIS_URL", CHECK_REDIS_URL_INVALID, f"= {_shown(value)} is not a URL", _REDIS_URL_FIX)
    parts = urlsplit(value)
    try:
        parts.port  # noqa: B018 — reading it is the check: a port that is no number in 0..65535 raises
    except ValueError:
        raise SettingError(
            "REDIS_URL", CHECK_REDIS_URL_INVALID, f"= {_shown(value)} has no valid port", _REDIS_URL_FIX
        ) from None
    database = parts.path.removeprefix("/")
    if parts.scheme in ("redis", "rediss"):
        shaped = bool(parts.hostname) and (not database or (database.isascii() and database.isdigit()))
    else:
        shaped = parts.scheme == "unix" and bool(parts.path)
    if not shaped:
        raise SettingError(
            "REDIS_URL", CHECK_REDIS_URL_INVALID, f"= {_shown(value)} is not a Redis URL", _REDIS_URL_FIX
        )
    return value


def _read_queues(value: object) -> dict[str, int]:
    if isinstance(value, dict) and all(
        isinstance(k, str) and k and not isinstance(v, bool) and isinstance(v, int) and v >= 1 for k, v in value.items()
    ):
        return dict(value)
    raise SettingError(
        "QUEUES",
        CHECK_VALUE_INVALID,
        f"= {_shown(value)} is no slot table",
        "map queue names to slot counts >= 1, e.g. {'default': 8}",
    )


def _read_fair_queues(value: object) -> frozenset[str]:
    """``FAIR_QUEUES``: the queues whose claims serve their orgs in turn."""
    if isinstance(value, list | tuple | set | frozenset) and all(isinstance(q, str) and q for q in value):
        return frozenset(value)
    raise SettingError(
        "FAIR_QUEUES",
        CHECK_VALUE_INVALID,
        f"= {_shown(value)} is no list of queue names",
        "list the queues to serve their orgs in turn, e.g. ['imports', 'payments']",
    )


def _read_async_concurrency(value: object) -> dict[str, int]:
    """``ASYNC_CONCURRENCY``: queue -> how many async jobs run at once on it (0 runs none)."""
    if isinstance(value, dict) and all(
        isinstance(k, str) and k and not isinstance(v, bool) and isinstance(v, int) and 0 <= v <= MAX_ASYNC_CONCURRENCY
        for k, v in value.items()
    ):
        return dict(value)
    raise SettingError(
        "ASYNC_CONCURRENCY",
        CHECK_VALUE_INVALID,
        f"= {_shown(value)} is no async slot table",
        f"map queue names to how many async jobs run at once, 0 to {MAX_ASYNC_CONCURRENCY}, e.g. {{'default': 500}}",
    )


def _read_outbox(value: object) -> str:
    if isinstance(value, str) and value in OUTBOX_MODES:
        return value
    raise SettingError("OUTBOX", CHECK_VALUE_INVALID, f"= {_shown(value)} is no mode", f"use one of {OUTBOX_MODES}")


def _read_context(value: object) -> str | None:
    if value is None or (isinstance(value, str) and _DOTTED_PATH.fullmatch(value)):
        return value
    raise SettingError(
        "CONTEXT",
        CHECK_VALUE_INVALID,
        f"= {_shown(value)} is no dotted path",
        "name a zero-argument callable by its dotted path, or None",
    )


def _read_limits(value: object) -> LimitConfig:
    try:
        return LimitConfig.from_settings(value)
    except InvariantError as exc:
        raise SettingError(
            "LIMITS",
            CHECK_LIMITS_INVALID,
            f"is refused: {exc.message}",
            'write e.g. {"PER_TENANT": 2, "PER_QUEUE": {"emails": 4}, "GLOBAL": 16, "RATE_PER_TENANT": (10, "1s")}',
        ) from None


def _read_duration(key: str, *, least: int) -> Callable[[object], int]:
    fix = "write e.g. '25s', '250ms', a timedelta or an int of milliseconds"

    def read(value: object) -> int:
        try:
            ms = parse_duration(value, field=f"ULTIMATE_JOBS[{key!r}]")
        except InvariantError:
            raise SettingError(key, CHECK_VALUE_INVALID, f"= {_shown(value)} is not a duration", fix) from None
        if ms < least:
            raise SettingError(key, CHECK_VALUE_INVALID, f"= {_shown(value)} is below {least} ms", fix)
        return ms

    return read


def _read_environment(value: object) -> str:
    """This deployment's name: a backfill declared with ``environments=`` runs only where this is one of
    them (``X_BACKFILL_ENVIRONMENT`` elsewhere)."""
    if isinstance(value, str) and _ENVIRONMENT.fullmatch(value):
        return value
    raise SettingError(
        "ENVIRONMENT",
        CHECK_ENVIRONMENT_INVALID,
        f"= {_shown(value)} is no deployment name",
        "name this deployment with letters, digits, '.', '_' or '-' (at most 64), e.g. 'production' or 'staging'",
    )


def _read_modules(value: object) -> tuple[str, ...]:
    if isinstance(value, list | tuple) and all(isinstance(m, str) and _MODULE_PATH.fullmatch(m) for m in value):
        return tuple(value)
    raise SettingError(
        "MODULES",
        CHECK_VALUE_INVALID,
        f"= {_shown(value)} is no list of modules",
        "list module paths, e.g. ['shop.jobs']",
    )


def _read_metrics_public(value: object) -> bool:
    """``METRICS_PUBLIC`` (default False: staff only)."""
    if isinstance(value, bool):
        return value
    raise SettingError("METRICS_PUBLIC", CHECK_VALUE_INVALID, f"= {_shown(value)} is no bool", "use True or False")


def _read_prepared_statements(value: object) -> bool:
    """``PREPARED_STATEMENTS`` (default True): the Postgres driver prepares its hot statements (the enqueue,
    the claim, the settles, the heartbeat) once per connection. False prepares none — for PgBouncer in
    transaction mode before 1.21, which cannot carry a prepared statement from one transaction to the next."""
    if isinstance(value, bool):
        return value
    raise SettingError("PREPARED_STATEMENTS", CHECK_VALUE_INVALID, f"= {_shown(value)} is no bool", "use True or False")


WORKER_GC_MODES = ("tuned", "python")


def _read_worker_gc(value: object) -> str:
    """``WORKER_GC``: ``"tuned"`` (default: ``jobs_worker`` freezes the booted app and collects less often,
    :mod:`ultimate_jobs.runtime.gc_tuning`) or ``"python"`` (the collector as Python sets it)."""
    if isinstance(value, str) and value in WORKER_GC_MODES:
        return value
    raise SettingError(
        "WORKER_GC", CHECK_VALUE_INVALID, f"= {_shown(value)} is no mode", f"use one of {WORKER_GC_MODES}"
    )


def _read_event_loop(value: object) -> str:
    """``EVENT_LOOP``: the worker's event loop for ``async def`` jobs — ``"auto"`` (default: uvloop when it is
    installed), ``"asyncio"`` or ``"uvloop"`` (which must then be installed)."""
    if isinstance(value, str) and value in EVENT_LOOPS:
        if value == "uvloop" and importlib.util.find_spec("uvloop") is None:
            raise SettingError(
                "EVENT_LOOP",
                CHECK_VALUE_INVALID,
                "= 'uvloop' but uvloop is not installed",
                "pip install 'ultimate_jobs[uvloop]'",
            )
        return value
    raise SettingError(
        "EVENT_LOOP", CHECK_VALUE_INVALID, f"= {_shown(value)} is no event loop", f"use one of {EVENT_LOOPS}"
    )


def _read_metrics_token(value: object) -> str | None:
    """``METRICS_TOKEN``: a bearer token for a scraper (default none)."""
    if value is None or (isinstance(value, str) and value.strip()):
        return value
    raise SettingError(
        "METRICS_TOKEN", CHECK_VALUE_INVALID, "must be a non-empty string", "set a token, or None for no token"
    )


def _read_retention(value: object) -> Retention:
    """``RETENTION``: a dict of some of :data:`RETENTION_KEYS`; a key left out keeps its default."""
    if not isinstance(value, Mapping):
        raise SettingError("RETENTION", CHECK_VALUE_INVALID, f"= {_shown(value)} is no dict", _RETENTION_FIX)
    unknown = sorted(str(k) for k in value if k not in RETENTION_KEYS)
    if unknown:
        raise SettingError("RETENTION", CHECK_VALUE_INVALID, f"has unknown keys {unknown}", _RETENTION_FIX)
    fields: dict[str, int | None] = {}
    for key in RETENTION_KEYS[:-1]:
        if key not in value or value[key] is None:
            if key in value:
                fields[f"{key.lower()}_ms"] = None
            continue
        try:
            ms = parse_duration(value[key], field=f"ULTIMATE_JOBS['RETENTION'][{key!r}]")
        except InvariantError:
            ms = -1
        if ms < 1_000:
            raise SettingError(
                "RETENTION", CHECK_VALUE_INVALID, f"[{key!r}] = {_shown(value[key])} is no retention", _RETENTION_FIX
            )
        fields[f"{key.lower()}_ms"] = ms
    batch = value.get("BATCH", PURGE_BATCH)
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_RETENTION_BATCH:
        raise SettingError("RETENTION", CHECK_VALUE_INVALID, f"['BATCH'] = {_shown(batch)} is no batch", _RETENTION_FIX)
    return Retention(**fields, batch=batch)


# key: (JobsSettings field, reader). Every key of ULTIMATE_JOBS is read here and nowhere else; a key
# left out takes its field's default from JobsSettings.
_KEYS: dict[str, tuple[str, Callable[[object], Any]]] = {
    "DRIVER": ("driver", _read_driver),
    "DATABASE": ("database", _read_database),
    "REDIS_URL": ("redis_url", _read_redis_url),
    "QUEUES": ("queues", _read_queues),
    "FAIR_QUEUES": ("fair_queues", _read_fair_queues),
    "ASYNC_CONCURRENCY": ("async_concurrency", _read_async_concurrency),
    "OUTBOX": ("outbox", _read_outbox),
    "CONTEXT": ("context", _read_context),
    "LIMITS": ("limits", _read_limits),
    "DRAIN_DEADLINE": ("drain_deadline_ms", _read_duration("DRAIN_DEADLINE", least=0)),
    "ENVIRONMENT": ("environment", _read_environment),
    "MODULES": ("modules", _read_modules),
    "VISIBILITY_TIMEOUT": ("visibility_timeout_ms", _read_duration("VISIBILITY_TIMEOUT", least=1)),
    "METRICS_PUBLIC": ("metrics_public", _read_metrics_public),
    "METRICS_TOKEN": ("metrics_token", _read_metrics_token),
    "RETENTION": ("retention", _read_retention),
    "WORKER_GC": ("worker_gc", _read_worker_gc),
    "EVENT_LOOP": ("event_loop", _read_event_loop),
    "PREPARED_STATEMENTS": ("prepared_statements", _read_prepared_statements),
}
KNOWN_KEYS = frozenset(_KEYS)


def read_settings() -> tuple[dict[str, Any], list[SettingError]]:
    """Every key of ``settings.ULTIMATE_JOBS`` through its reader: the values that read (by
    :class:`JobsSettings` field) and every refusal — what the system check reports, all at once."""
    raw = getattr(settings, "ULTIMATE_JOBS", None)
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        return {}, [SettingError(None, CHECK_VALUE_INVALID, f"is a {type(raw).__name__}", "make it a dict")]
    errors = [
        SettingError(
            key,
            CHECK_KEY_UNKNOWN,
            "is not a setting" + "".join(f"; did you mean {m!r}" for m in get_close_matches(str(key), KNOWN_KEYS, 1)),
            f"known keys: {', '.join(sorted(KNOWN_KEYS))}",
        )
        for key in raw
        if key not in KNOWN_KEYS
    ]
    values: dict[str, Any] = {}
    defaults = JobsSettings()
    for key, (name, reader) in _KEYS.items():
        if key == "DRIVER" and key not in raw:
            continue  # follows the database, below
        if key not in raw:
            values[name] = getattr(defaults, name)
            continue
        try:
            values[name] = reader(raw[key])
        except SettingError as exc:
            errors.append(exc)
    if "DRIVER" not in raw and "database" in values:
        try:
            values["driver"] = resolve_driver(values["database"])
        except SettingError as exc:
            errors.append(exc)
    if values.get("metrics_public") and values.get("metrics_token") is not None:
        errors.append(
            SettingError(
                "METRICS_TOKEN",
                CHECK_VALUE_INVALID,
                "is set with METRICS_PUBLIC, and a public view ignores the token",
                "drop one of them",
            )
        )
    return values, errors


def resolve_driver(alias: str) -> str:
    """The driver an unset ``DRIVER`` means for database ``alias``: ``postgres`` on PostgreSQL, ``sqlite`` on
    SQLite; any other vendor is ``X_SETTINGS_DRIVER_UNKNOWN`` naming the choices. An alias that is not in
    ``DATABASES`` answers ``postgres`` (the check reports the alias itself: ``X_SETTINGS_DATABASE_UNKNOWN``)."""
    if alias not in connections.settings:
        return "postgres"
    vendor = connections[alias].vendor
    if vendor in DRIVER_FOR_VENDOR:
        return DRIVER_FOR_VENDOR[vendor]
    raise SettingError(
        "DRIVER",
        CHECK_DRIVER_UNKNOWN,
        f"is unset and DATABASES[{alias!r}] is {vendor}, which no built-in driver runs on",
        f"set DRIVER to one of {DRIVERS} (postgres needs PostgreSQL, sqlite needs SQLite) or a dotted path, "
        "or point DATABASE at a PostgreSQL or SQLite alias",
    )


@dataclass(frozen=True, slots=True)
class DriverResolution:
    """Which driver the settings resolve to and why: what ``manage.py jobs driver`` prints.

    >>> str(driver_resolution())
    "driver 'sqlite' (DRIVER unset; DATABASES['default'] is sqlite)"
    """

    driver: str | None
    """``None`` when no driver resolves (``manage.py check`` says why)."""
    database: str
    """The ``DATABASE`` alias: where an SQL driver's rows and the outbox live."""
    reason: str

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` shape."""
        return {"driver": self.driver, "database": self.database, "reason": self.reason}

    def __str__(self) -> str:
        return f"driver {self.driver!r} ({self.reason})" if self.driver else f"no driver resolves ({self.reason})"


def driver_resolution() -> DriverResolution:
    """Which driver the settings resolve to and why: ``ULTIMATE_JOBS['DRIVER']``, or the vendor of the
    ``DATABASE`` alias when ``DRIVER`` is unset."""
    values, _ = read_settings()
    database = values.get("database", "default")
    if "driver" not in values:
        return DriverResolution(None, database, "a setting is invalid; python manage.py check says which")
    raw = getattr(settings, "ULTIMATE_JOBS", None) or {}
    if isinstance(raw, Mapping) and "DRIVER" in raw:
        return DriverResolution(values["driver"], database, "ULTIMATE_JOBS['DRIVER']")
    vendor = connections[database].vendor if database in connections.settings else "unknown"
    return DriverResolution(values["driver"], database, f"DRIVER unset; DATABASES[{database!r}] is {vendor}")


def jobs_settings() -> JobsSettings:
    """Read and validate ``settings.ULTIMATE_JOBS``; a value that cannot be read is ``X_INVARIANT``
    naming it (a :class:`SettingError`)."""
    values, errors = read_settings()
    if errors:
        raise errors[0]
    return JobsSettings(**values)


def context_factory(path: str | None) -> Callable[[], Any]:
    """The ctx factory ``ULTIMATE_JOBS['CONTEXT']`` names (a dotted path to a zero-argument callable);
    with none configured :func:`no_context`: every run gets ``ctx=None``."""
    if path is None:
        return no_context
    factory = import_string(path)
    if not callable(factory):
        raise InvariantError(f"ULTIMATE_JOBS['CONTEXT'] = {path!r} is not callable", {"path": path})
    refuse_async(factory, what=f"ULTIMATE_JOBS['CONTEXT'] = {path!r}", meta={"path": path})
    return factory  # type: ignore[no-any-return]


def build_driver(config: JobsSettings | None = None) -> JobDriver:
    """Build the driver ``ULTIMATE_JOBS['DRIVER']`` names, passing it the settings it needs (its database
    alias, ``VISIBILITY_TIMEOUT``, ``FAIR_QUEUES``, ``REDIS_URL``): this is where a built-in driver's
    settings are read — the drivers themselves read none. A dotted path is called with no argument
    (then given ``FAIR_QUEUES`` as its ``fair_queues``)."""
    config = config or jobs_settings()
    common: dict[str, Any] = {  # what every built-in driver takes
        "clock": job_clock(),
        "visibility_timeout_ms": config.visibility_timeout_ms,
        "fair_queues": config.fair_queues,
    }
    if config.driver == "memory":
        from .drivers.memory import MemoryDriver

        return MemoryDriver(**common)
    if config.driver == "postgres":
        from .drivers.postgres.driver import PostgresDriver

        return PostgresDriver(alias=config.database, prepared_statements=config.prepared_statements, **common)
    if config.driver == "sqlite":
        from .drivers.sqlite.driver import SqliteDriver

        return SqliteDriver(alias=config.database, **common)
    if config.driver == "redis":
        try:
            from .drivers.redis import RedisDriver
        except ImportError as exc:
            raise DriverUnavailableError(
                "the 'redis' driver needs redis-py; pip install 'ultimate_jobs[redis]', or set "
                "ULTIMATE_JOBS['DRIVER'] = 'postgres' (jobs in your Django database)",
                {"driver": config.driver},
            ) from exc
        return RedisDriver.from_url(config.redis_url, **common)
    factory = import_string(config.driver)
    built: JobDriver = factory()
    if config.fair_queues:  # a driver of your own declares fair_queues, settable after it is built
        built.fair_queues = config.fair_queues
    return built


def build_event_bus() -> EventBus:
    """The bus settings call for: on the Postgres driver, the Postgres bus over the driver's database (every
    process sees every event); on the SQLite driver, the SQLite bus over its database (likewise); otherwise a
    process-local memory bus — also while the settings cannot be read (the system check reports them)."""
    from .drivers.memory.events import MemoryEventBus

    try:
        config = jobs_settings()
    except UltimateError:
        return MemoryEventBus()
    if config.driver == "postgres":
        from .drivers.postgres.events import PostgresEventBus
        from .drivers.postgres.executor import django_executor

        return PostgresEventBus(django_executor(config.database))
    if config.driver == "sqlite":
        from .drivers.sqlite.events import SqliteEventBus
        from .drivers.sqlite.executor import SqliteExecutor

        return SqliteEventBus(SqliteExecutor(config.database))
    return MemoryEventBus()


register_builders(driver=build_driver, event_bus=build_event_bus, database=lambda: jobs_settings().database)
