"""A role command's signal handler only notes the signal; ``run()`` acts on it.

Python runs a handler on the main thread between two bytecodes — possibly inside a lock the main thread
holds, such as the one of the ``Event`` ``run()`` waits on, or inside the first signal's own handler when
a second signal lands (Ctrl-C reaches a process and its supervisor, which passes a SIGTERM on). A handler
that took that lock would deadlock the process it was meant to stop; these tests hold the lock the way
the main thread would and call the handler."""

from __future__ import annotations

import signal
import threading

from ultimate_jobs.runtime.lifecycle import RoleLifecycle, Roles


class IdleRole(RoleLifecycle):
    drain_deadline_ms = 1_000

    def __init__(self) -> None:
        self._init_lifecycle()


def returns_while_held(lock: threading.Condition, handler: object) -> bool:
    """Whether ``handler(SIGINT, None)`` returns while ``lock`` is held (by this thread, as the main thread
    would hold it when the signal lands)."""
    with lock:
        call = threading.Thread(target=handler, args=(signal.SIGINT, None), daemon=True)
        call.start()
        call.join(2.0)
        return not call.is_alive()


def test_a_roles_handler_takes_no_lock_and_run_drains_on_the_noted_signal() -> None:
    group = Roles([], drain_deadline_ms=1_000)
    assert returns_while_held(group._drain._cond, group._on_signal)  # the Event run() waits on
    assert group.run(install_signals=False) is True  # acts on the noted SIGINT: drains, returns


def test_a_role_lifecycles_handler_takes_no_lock_and_run_drains_on_the_noted_signal() -> None:
    role = IdleRole()
    assert returns_while_held(role._drain_requested._cond, role._on_signal)
    role.run(install_signals=False)  # acts on the noted SIGINT: accepts, closes, returns
    assert role.state == "stopped"
