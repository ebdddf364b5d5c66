"""A role command's signal handler (and ``jobs_worker --processes``' supervisor's) only notes the signal;
``run()`` acts on it.

Python runs a handler on the main thread between two bytecodes — possibly inside a lock the main thread
holds, such as the one of the ``Event`` ``run()`` waits on, or inside the first signal's own handler when
a second signal lands (Ctrl-C reaches a process and its supervisor, which passes a SIGTERM on). A handler
that took that lock would deadlock the process it was meant to stop; these tests hold the lock the way
the main thread would and call the handler."""

from __future__ import annotations

import signal
import sys
import threading

from ultimate_jobs.runtime.lifecycle import RoleLifecycle, Roles
from ultimate_jobs.worker.supervisor import Supervisor


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


def test_the_supervisors_handler_takes_no_lock_and_run_stops_its_children_on_the_noted_signal() -> None:
    code = "import time; time.sleep(60)"  # SIGTERM ends it
    supervisor = Supervisor(processes=1, argv_for=lambda slot: [sys.executable, "-c", code], drain_deadline_ms=60_000)
    assert returns_while_held(supervisor._stop._cond, supervisor._on_signal)  # the Event run() waits on
    assert not supervisor._forced()  # one signal drains; it does not kill
    assert supervisor.run(install_signals=False) is True  # acts on the noted SIGINT: SIGTERMs the child, returns
    assert supervisor.pids() == []


def test_a_second_noted_signal_or_one_after_a_stop_was_asked_for_forces_the_supervisors_stop() -> None:
    twice = Supervisor(processes=1, argv_for=lambda slot: [], drain_deadline_ms=60_000)
    twice._on_signal(signal.SIGINT, None)
    twice._on_signal(signal.SIGTERM, None)  # Ctrl-C, then the terminal's SIGTERM
    asked = Supervisor(processes=1, argv_for=lambda slot: [], drain_deadline_ms=60_000)
    asked.request_stop("deploy")
    asked._on_signal(signal.SIGINT, None)
    assert twice._forced() and asked._forced()
