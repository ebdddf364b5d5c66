"""The outbox router: ``handle.enqueue()`` inside a transaction on the jobs database stages the row in
that transaction; outside one it publishes straight to the driver (``"optional"``) or refuses
(``"required"``, ``X_OUTBOX_NO_TX``). Installed with :func:`ultimate_jobs.outbox.install_outbox` (or
``set_jobs_router(OutboxRouter(...))``); nothing stages until it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from asgiref.sync import sync_to_async

from ..contracts.jobs import Enqueued, EnqueueRequest
from ..contracts.outbox import OUTBOX_MODES, OutboxMode, OutboxStore
from ..contracts.protocol import JobDriver
from ..core.ids import new_id
from ..core.installed import job_driver
from ..errors import InvariantError, OutboxNoTxError
from ..guards.admission import check_request


class OutboxRouter:
    """Enqueue routing through an outbox store.

    ``mode``: ``"optional"`` stages inside a transaction and publishes directly outside one;
    ``"required"`` makes an enqueue outside a transaction ``X_OUTBOX_NO_TX``; ``"off"`` always publishes
    directly. ``current_tx()`` answers whether the caller is in a transaction on the jobs database (by
    default the store's :meth:`~.store.OutboxStore.in_transaction`). ``driver`` is where a direct enqueue
    goes (by default :func:`~ultimate_jobs.core.installed.job_driver` at the call).

    Ids are allocated at stage time — the staged row's id IS the job id — so a staged enqueue answers
    the job's own ids. ``deduped`` is the one answer only the publish can give: a staged enqueue always
    answers ``deduped=False``, and when a live job already holds its idempotency key the publish
    creates nothing and those ids name no row.

    >>> set_jobs_router(OutboxRouter(store=postgres_outbox_store(), mode="required"))
    >>> with transaction.atomic():
    ...     order = Order.objects.create(...)
    ...     charge.enqueue({"order_id": order.pk})   # joins the transaction
    """

    def __init__(
        self,
        *,
        store: OutboxStore,
        driver: JobDriver | None = None,
        mode: OutboxMode = "optional",
        current_tx: Callable[[], bool] | None = None,
    ) -> None:
        if mode not in OUTBOX_MODES:
            raise InvariantError(f"OutboxRouter(mode={mode!r}); use one of {OUTBOX_MODES}", {"mode": mode})
        self.store = store
        self.mode: OutboxMode = mode
        self._driver = driver
        self._current_tx = current_tx or store.in_transaction

    @property
    def driver(self) -> JobDriver:
        """Where a direct enqueue goes."""
        return self._driver or job_driver()

    def in_transaction(self) -> bool:
        """Whether an enqueue now would stage (the caller holds a transaction on the jobs database)."""
        return bool(self._current_tx())

    def enqueue(self, request: EnqueueRequest) -> Enqueued:
        return self.enqueue_many([request])[0]

    def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        if not requests:
            return []
        for request in requests:  # before any statement: a bad request never aborts the caller's transaction
            check_request(request)
        if self.mode != "off" and self.in_transaction():
            return self._stage(requests)
        self._refuse_outside_a_transaction(requests)
        return self.driver.enqueue_many(requests)

    async def aenqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        """From async code no sync caller waits on (:func:`ultimate_jobs.core.routing.aenqueue_many`): it holds
        no transaction (Django's are synchronous), so the rows are published at once — or, under
        ``"required"``, refused as an enqueue outside a transaction is."""
        native = self.driver.async_enqueue
        if native is None:  # the driver writes from a thread: enqueue_many there, which sees no transaction
            return await sync_to_async(self.enqueue_many, thread_sensitive=True)(requests)
        if not requests:
            return []
        for request in requests:
            check_request(request)
        self._refuse_outside_a_transaction(requests)
        return await native.enqueue_many(requests)

    def _refuse_outside_a_transaction(self, requests: Sequence[EnqueueRequest]) -> None:
        if self.mode == "required":
            names = sorted({r.name for r in requests})
            raise OutboxNoTxError(
                f"enqueue of {', '.join(names)} outside a transaction: ULTIMATE_JOBS['OUTBOX'] is 'required'. "
                "Enqueue inside transaction.atomic() on the jobs database, next to the rows the job is about",
                {"jobs": names, "mode": self.mode},
            )

    def _stage(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        for request in requests:
            if request.on_conflict == "error":
                raise InvariantError(
                    f"{request.name}: on_conflict='error' cannot be answered inside a transaction — a staged "
                    "enqueue learns about a live duplicate only when the relay publishes it, after commit. "
                    "Pass on_conflict='dedupe', or enqueue outside the transaction",
                    {"job": request.name},
                )
        staged = [
            dataclasses.replace(r, id=r.id or new_id(), run_id=r.run_id or new_id(), on_conflict="dedupe")
            for r in requests
        ]
        return [Enqueued(record.id, record.run_id, False) for record in self.store.stage(staged)]
