"""Build the outbox from ``settings.ULTIMATE_JOBS``: the process's store, the router (installed at start-up
when ``OUTBOX`` is ``"optional"`` or ``"required"`` — :func:`install_outbox_from_settings` — or by hand with
:func:`install_outbox`) and the relay role (what ``jobs_relay`` and ``jobs_dev`` run).

The outbox stages in the jobs database (PostgreSQL or SQLite) whatever the driver is: ``x_outbox`` lives there
(``ULTIMATE_JOBS['DATABASE']``), next to the business rows a transaction writes, and the relay
publishes onto the configured driver — Postgres, Redis or memory alike.
"""

from __future__ import annotations

import threading
from typing import cast

from django.db import connections

from ..conf import jobs_settings
from ..contracts.outbox import DEFAULT_CLAIM_LEASE_MS, OUTBOX_MODES, OutboxMode, OutboxStore
from ..contracts.protocol import JobDriver
from ..core.durations import Duration, parse_duration
from ..core.installed import job_driver
from ..core.routing import set_jobs_router
from ..drivers.postgres.outbox import postgres_outbox_store
from ..errors import DriverUnavailableError, InvariantError, UltimateError
from .relay import RELAY_BATCH_SIZE, RELAY_INTERVAL_MS, OutboxRelay, outbox_relay
from .routing import OutboxRouter

_lock = threading.Lock()
_store: OutboxStore | None = None


def build_outbox_store(*, claim_lease_ms: int = DEFAULT_CLAIM_LEASE_MS) -> OutboxStore:
    """The store over the jobs database — Postgres or SQLite, by its vendor; ``X_DRIVER_UNAVAILABLE`` on any
    other database."""
    alias = jobs_settings().database
    if alias not in connections.settings:
        raise DriverUnavailableError(
            f"no database alias {alias!r} in settings.DATABASES; set ULTIMATE_JOBS['DATABASE'] to one that exists",
            {"alias": alias},
        )
    vendor = connections[alias].vendor
    if vendor == "sqlite":
        from ..drivers.sqlite.outbox import sqlite_outbox_store

        return sqlite_outbox_store(alias=alias, claim_lease_ms=claim_lease_ms)
    if vendor != "postgresql":
        raise DriverUnavailableError(
            f"the outbox stages in PostgreSQL or SQLite (x_outbox, in the business rows' transaction); alias "
            f"{alias!r} is {vendor}. Point ULTIMATE_JOBS['DATABASE'] at a PostgreSQL or SQLite database or leave "
            "the outbox uninstalled",
            {"alias": alias, "vendor": vendor},
        )
    return postgres_outbox_store(
        alias=alias, claim_lease_ms=claim_lease_ms, prepared=jobs_settings().prepared_statements
    )


def outbox_supported() -> bool:
    """Whether this process's jobs database can hold ``x_outbox`` (the alias exists and is PostgreSQL or
    SQLite): what ``jobs_dev`` asks before adding the relay to its roles."""
    alias = jobs_settings().database
    return alias in connections.settings and connections[alias].vendor in ("postgresql", "sqlite")


def outbox_store() -> OutboxStore:
    """The process's outbox store, built from settings on first use (the router and an in-process relay
    share it)."""
    global _store
    with _lock:
        if _store is None:
            _store = build_outbox_store()
        return _store


def set_outbox_store(store: OutboxStore | None) -> None:
    """Install ``store`` as the process's outbox store (``None`` rebuilds from settings on next use)."""
    global _store
    with _lock:
        _store = store


def install_outbox(
    *, mode: OutboxMode | None = None, store: OutboxStore | None = None, driver: JobDriver | None = None
) -> OutboxRouter | None:
    """Install the outbox router process-wide: from now on ``handle.enqueue()`` inside
    ``transaction.atomic()`` on the jobs database stages its row in that transaction. ``mode`` defaults to
    ``ULTIMATE_JOBS['OUTBOX']``; ``"off"`` installs nothing (and uninstalls a router installed before),
    answering ``None``. ``ultimate_jobs`` calls it at start-up when ``OUTBOX`` asks for the outbox
    (:func:`install_outbox_from_settings`); call it yourself to wire a store or a mode by hand, and run a
    relay (``manage.py jobs_relay``, or ``jobs_dev``) to publish what commits.

    >>> install_outbox(mode="required", store=postgres_outbox_store(alias="orders"))
    """
    chosen = mode if mode is not None else jobs_settings().outbox
    if chosen not in OUTBOX_MODES:
        raise InvariantError(f"install_outbox(mode={chosen!r}); use one of {OUTBOX_MODES}", {"mode": chosen})
    if chosen == "off":
        set_jobs_router(None)
        return None
    router = OutboxRouter(store=store or outbox_store(), driver=driver, mode=chosen)
    set_jobs_router(router)
    return router


def install_outbox_from_settings() -> OutboxRouter | None:
    """What ``ultimate_jobs``'s ``AppConfig.ready()`` runs in every process: ``OUTBOX = "optional"`` or
    ``"required"`` installs the router over the jobs database; ``"off"`` (the default) touches nothing.
    A setting that cannot be read, or a jobs database that cannot hold ``x_outbox``, installs nothing —
    the system check reports it (``manage.py check``, and every command that runs the checks, fails)."""
    try:
        mode = jobs_settings().outbox
        return install_outbox(mode=cast(OutboxMode, mode)) if mode != "off" else None
    except UltimateError:
        return None


def uninstall_outbox() -> None:
    """Put the direct fallback back: every enqueue publishes straight to the driver again."""
    set_jobs_router(None)


def relay_from_settings(
    *,
    batch_size: int | None = None,
    interval: Duration | None = None,
    claim_lease: Duration | None = None,
    drain_deadline: Duration | None = None,
    store: OutboxStore | None = None,
    driver: JobDriver | None = None,
) -> OutboxRelay:
    """A relay over the process's outbox store (or a fresh one with ``claim_lease``), publishing onto the
    configured driver, with the configured drain deadline. What ``jobs_relay`` and ``jobs_dev`` run."""
    config = jobs_settings()
    if store is None:
        if claim_lease is not None:
            store = build_outbox_store(claim_lease_ms=parse_duration(claim_lease, field="claim_lease"))
        else:
            store = outbox_store()
    return outbox_relay(
        store=store,
        driver=driver or job_driver(),
        interval=interval if interval is not None else RELAY_INTERVAL_MS,
        batch_size=batch_size if batch_size is not None else RELAY_BATCH_SIZE,
        drain_deadline=drain_deadline if drain_deadline is not None else config.drain_deadline_ms,
    )
