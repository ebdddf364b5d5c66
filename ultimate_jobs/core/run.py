"""``JobRun``: the one argument a job body receives."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .scope import Actor
from .signals import CancelSignal

InputT = TypeVar("InputT")


@dataclass(slots=True)
class JobRun(Generic[InputT]):
    """Everything a body may read: its parsed ``input``, the ``step`` runner, the app's ``ctx``, which
    ``attempt`` this is and whether it is the ``final_attempt``, the ids, the cancel ``signal``.

    >>> @job(idempotency_key=lambda i: i.order_id, tenant=lambda i: i.org_id, input=ChargeInput)
    ... def charge(run: JobRun[ChargeInput]) -> dict:
    ...     return run.step.run("charge", lambda: gateway.charge(run.input.order_id))

    An ``async def`` body awaits its steps: ``await run.step.run("charge", charge_async)``.
    """

    input: InputT
    _make_step: Callable[[], Any] = field(repr=False)
    """Builds :attr:`step` the first time a body reads it: a body that takes no step builds none."""
    ctx: Any
    attempt: int
    final_attempt: bool
    job_id: str
    run_id: str
    signal: CancelSignal
    name: str = ""
    queue: str = "default"
    actor: Actor = field(default_factory=Actor)
    _progress: Callable[[float, float | None, str | None], None] | None = None
    _step: Any = field(default=None, repr=False)

    @property
    def step(self) -> Any:
        """The step runner: a :class:`~ultimate_jobs.core.steps.Step` in a sync body, an
        :class:`~ultimate_jobs.core.steps.AsyncStep` (the same steps, awaited) in an ``async def`` one — typed
        ``Any`` so each reads naturally: ``run.step.run(...)`` there, ``await run.step.run(...)`` here."""
        if self._step is None:
            self._step = self._make_step()
        return self._step

    @property
    def tenant_id(self) -> str | None:
        """The org the run acts under (``None`` for ``tenant="none"``)."""
        return self.actor.org_id

    def progress(self, done: float, total: float | None = None, note: str | None = None) -> None:
        """Report how far the run has got — as often as the loop turns; writes are throttled to one a second."""
        if self._progress is not None:
            self._progress(done, total, note)
