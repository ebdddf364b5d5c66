"""The shop's outside world — payment gateway, mailer, carrier, warehouse, on-call pager — as small
deterministic fakes. Jobs reach them through ``run.ctx`` (an ``ultimate_jobs`` context), never by
import, so the demo scenario can hand each run a fresh set with scripted outages.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ultimate_jobs import CancelSignal, UltimateError

HANG_LIMIT_SECONDS = 10.0  # a real-time safety bound: the demo always releases a hang long before it

# The shop's own error codes. jobs.py classifies them with register_error_retry().
MAIL_TEMPORARY = "X_MAIL_TEMPORARY"
WAREHOUSE_BUSY = "X_WAREHOUSE_BUSY"
REFUND_REJECTED = "X_REFUND_REJECTED"


@dataclass
class PaymentGateway:
    """Charges and refunds; remembers every capture it made (its own ledger)."""

    captured: dict[str, int] = field(default_factory=dict)

    def charge(self, *, order_number: str, amount_cents: int) -> str:
        charge_id = f"ch_{order_number}_{len(self.captured) + 1}"
        self.captured[charge_id] = amount_cents
        return charge_id

    def captures_of(self, *, order_number: str) -> int:
        """How many captures the gateway holds for one order (a read of its API)."""
        return sum(1 for charge_id in self.captured if charge_id.startswith(f"ch_{order_number}_"))

    def refund(self, *, order_number: str, amount_cents: int) -> str:
        prefix = f"ch_{order_number}_"
        if not any(charge_id.startswith(prefix) for charge_id in self.captured):
            raise UltimateError(
                REFUND_REJECTED,
                f"the gateway holds no captured charge for order {order_number}; nothing to refund",
                {"order": order_number, "amount_cents": amount_cents},
            )
        return f"re_{order_number}"


@dataclass
class Mailer:
    """Sends email. The first ``outages`` sends hit a greylisting relay and fail with a transient code."""

    outages: int = 0
    sent: list[tuple[str, str]] = field(default_factory=list)

    def send(self, *, to: str, subject: str) -> str:
        if self.outages > 0:
            self.outages -= 1
            raise UltimateError(MAIL_TEMPORARY, "421 4.7.0 mail relay busy, try again later", {"to": to})
        self.sent.append((to, subject))
        return f"msg-{len(self.sent)}"


@dataclass
class Carrier:
    """Books shipping labels. The first ``timeouts`` calls time out (a plain ``TimeoutError``)."""

    timeouts: int = 0
    booked: list[str] = field(default_factory=list)

    def book_label(self, *, order_number: str) -> str:
        if self.timeouts > 0:
            self.timeouts -= 1
            raise TimeoutError("the carrier API did not answer within 10s")
        label = f"LBL-{order_number}"
        self.booked.append(label)
        return label


@dataclass
class Warehouse:
    """Stock levels per warehouse. ``down`` warehouses answer 503 with a Retry-After."""

    down: frozenset[str] = frozenset()
    retry_after_seconds: int = 120

    def stock_levels(self, warehouse: str) -> dict[str, int]:
        if warehouse in self.down:
            raise UltimateError(
                WAREHOUSE_BUSY,
                f"warehouse {warehouse} answered 503 Service Unavailable",
                {"warehouse": warehouse, "retryAfterSeconds": self.retry_after_seconds},
            )
        return {"sku-mug": 40, "sku-tee": 12}


@dataclass
class Bank:
    """Pays out sellers. Its settlement API hangs until the caller gives up — which is what a job's
    ``timeout`` is for: the body hands the cancel signal on, and the call returns when it aborts."""

    def settle(self, batch: str, signal: CancelSignal) -> str:
        signal.wait(HANG_LIMIT_SECONDS)  # "hangs"; wakes the moment the job's deadline aborts the signal
        signal.throw_if_aborted()
        return f"settled {batch}"


@dataclass
class Ledger:
    """The accounting system. It must never see two syncs of one account at once; ``sync`` holds
    until the demo opens the gate, so a second run of the same account arrives while one is live."""

    started: threading.Event = field(default_factory=threading.Event)
    gate: threading.Event = field(default_factory=threading.Event)
    synced: list[str] = field(default_factory=list)

    def sync(self, account_id: str) -> int:
        self.started.set()
        self.gate.wait(HANG_LIMIT_SECONDS)
        self.synced.append(account_id)
        return len(self.synced)


@dataclass
class ShopServices:
    """What a shop job reads as ``run.ctx`` (and ``on_settled`` as ``settled.ctx``)."""

    gateway: PaymentGateway = field(default_factory=PaymentGateway)
    mailer: Mailer = field(default_factory=Mailer)
    carrier: Carrier = field(default_factory=Carrier)
    warehouse: Warehouse = field(default_factory=Warehouse)
    bank: Bank = field(default_factory=Bank)
    ledger: Ledger = field(default_factory=Ledger)
    pages: list[str] = field(default_factory=list)

    def page_on_call(self, message: str) -> None:
        """Tell whoever is on call (here: remember the line so the demo can print it)."""
        self.pages.append(message)


_services = ShopServices()


def shop_services() -> ShopServices:
    """The process's services — the factory ``ULTIMATE_JOBS["CONTEXT"]`` names for the demo project."""
    return _services
