"""The transactional outbox: ``handle.enqueue()`` inside ``transaction.atomic()`` writes its row in the
caller's transaction, and a relay publishes it after commit — so a rollback leaves no job and a commit
can never lose one. Not on until installed: :func:`install_outbox` (the router) and a running
:func:`outbox_relay` (``manage.py jobs_relay``). See docs/outbox.md.
"""

from ..contracts.outbox import DEFAULT_CLAIM_LEASE_MS, OUTBOX_WAKE_CHANNEL, OutboxMode, OutboxRecord, OutboxStore
from ..drivers.memory.outbox import MemoryOutboxStore, memory_outbox_store
from ..drivers.postgres.outbox import PostgresOutboxStore, postgres_outbox_store
from .boot import (
    install_outbox,
    outbox_store,
    outbox_supported,
    relay_from_settings,
    set_outbox_store,
    uninstall_outbox,
)
from .relay import OutboxRelay, RelayStats, outbox_relay
from .routing import OutboxRouter

__all__ = [
    "DEFAULT_CLAIM_LEASE_MS",
    "OUTBOX_WAKE_CHANNEL",
    "MemoryOutboxStore",
    "OutboxMode",
    "OutboxRecord",
    "OutboxRelay",
    "OutboxRouter",
    "OutboxStore",
    "PostgresOutboxStore",
    "RelayStats",
    "install_outbox",
    "memory_outbox_store",
    "outbox_relay",
    "outbox_store",
    "outbox_supported",
    "postgres_outbox_store",
    "relay_from_settings",
    "set_outbox_store",
    "uninstall_outbox",
]
