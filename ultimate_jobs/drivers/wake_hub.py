"""The subscribers of a driver's cross-process wake, and the wake itself: started with the first
subscriber (only the worker role subscribes, so an enqueuing web process holds none), stopped with the
last and by the driver's ``close()``. The Postgres (LISTEN session), SQLite (file watch) and Redis
(stream reader) drivers differ only in how their wake starts."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar


class Wake(Protocol):
    """What a hub needs of a running wake."""

    def is_live(self) -> bool: ...

    def stop(self) -> object: ...


W = TypeVar("W", bound=Wake)
Listener = Callable[[str], None]


class WakeHub(Generic[W]):
    """``start(tell)`` builds and starts the wake, which calls ``tell(queue)`` for every queue it hears,
    or answers ``None`` when there is none to run (the next subscriber asks again)."""

    def __init__(self, start: Callable[[Listener], W | None]) -> None:
        self._start = start
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        self.wake: W | None = None

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Add ``listener``; answers its unsubscribe."""
        with self._lock:
            self._listeners.append(listener)
            if self.wake is None:
                self.wake = self._start(self.tell)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)
                wake = None
                if not self._listeners:
                    wake, self.wake = self.wake, None
            if wake is not None:
                wake.stop()

        return unsubscribe

    def tell(self, queue: str) -> None:
        """Tell every subscriber ``queue``."""
        for listener in list(self._listeners):
            listener(queue)

    @property
    def listening(self) -> bool:
        """Whether anyone subscribes."""
        return bool(self._listeners)

    def is_live(self) -> bool:
        """Whether the wake runs and reports itself live."""
        wake = self.wake
        return wake is not None and wake.is_live()

    def close(self) -> None:
        """Forget every subscriber and stop the wake."""
        with self._lock:
            self._listeners.clear()
            wake, self.wake = self.wake, None
        if wake is not None:
            wake.stop()
