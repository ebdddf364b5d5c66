"""The job and task registry: one durable name, one declaration.

A job name is the durable queue key its rows carry, so two declarations on one name are refused
(``X_JOB_DUPLICATE``) at the earliest point it is decidable: the second ``@job``/``@task``. The same
declaration seen twice (autodiscovery and ``MODULES`` both importing one module, or a module
reloaded) is one registration.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import JobDuplicateError, JobNameTakenError


class Registered(Protocol):
    """What the registry holds: a job or task handle."""

    name: str
    kind: str
    origin: str
    explicit_name: bool


@dataclass(frozen=True, slots=True)
class Source:
    """Names a worker runs that no ``@job`` registered: an adapter (the ``django.tasks`` backend) answers
    the handle for a row's name (``resolve``), and the queues it enqueues on (``queues``) so a worker
    started without ``--queues`` serves them."""

    name: str
    resolve: Callable[[str], Any]
    queues: Callable[[], set[str]]


_lock = threading.RLock()
_entries: dict[str, Registered] = {}
_sources: dict[str, Source] = {}


def add_source(source: Source) -> None:
    """Ask ``source`` for the names the registry does not hold (one source per ``source.name``)."""
    with _lock:
        _sources[source.name] = source


def resolve_elsewhere(name: str) -> Any:
    """The handle a source answers for ``name``, or None."""
    with _lock:
        sources = list(_sources.values())
    for source in sources:
        found = source.resolve(name)
        if found is not None:
            return found
    return None


def source_queues() -> set[str]:
    """Every queue the sources enqueue on."""
    with _lock:
        sources = list(_sources.values())
    return set().union(*(source.queues() for source in sources))


def register(handle: Registered) -> None:
    """Seat ``handle`` under its name, or refuse a second declaration on that name."""
    with _lock:
        seated = _entries.get(handle.name)
        if seated is None or seated is handle or seated.origin == handle.origin:
            _entries[handle.name] = handle
            return
        meta: dict[str, Any] = {"name": handle.name, "seated": seated.origin, "refused": handle.origin}
        if handle.explicit_name and seated.explicit_name:
            raise JobNameTakenError(
                f"two definitions set name={handle.name!r} ({seated.origin} and {handle.origin}); "
                "a job name is the durable queue key its rows carry — give one of them another name",
                meta,
            )
        raise JobDuplicateError(
            f"{handle.kind} {handle.name!r} ({handle.origin}) collides with the {seated.kind} declared at "
            f"{seated.origin}; pass name= to one of them",
            meta,
        )


def lookup(name: str) -> Registered | None:
    """The handle registered under ``name``."""
    with _lock:
        return _entries.get(name)


def registered(kind: str | None = None) -> list[Registered]:
    """Every registered handle (of ``kind``), by name."""
    with _lock:
        return sorted((h for h in _entries.values() if kind is None or h.kind == kind), key=lambda h: h.name)


def unregister(name: str) -> None:
    """Forget one name (tests that declare throwaway jobs)."""
    with _lock:
        _entries.pop(name, None)
