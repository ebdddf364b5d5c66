"""The demo shop's one table: orders, owned by an org (tenant-scoped through ultimate_jobs.guards.tenancy)."""

from __future__ import annotations

from django.db import models

from ultimate_jobs.guards.tenancy import TenantScopedModel


class Order(TenantScopedModel):
    """An order placed in one org's store.

    ``charges`` and ``emailed`` count side effects as they land, so the demo can show that a replayed
    attempt charged nobody twice. Inside a job run, reading or writing another org's order raises
    ``X_TENANCY_ACTOR_MISMATCH``.
    """

    class Status(models.TextChoices):
        PLACED = "placed", "placed"
        PAID = "paid", "paid"
        FULFILLED = "fulfilled", "fulfilled"
        ATTENTION = "attention", "needs attention"

    org_id = models.CharField(max_length=64, db_index=True)
    number = models.CharField(max_length=32)
    total_cents = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PLACED)
    charged = models.BooleanField(default=False)
    charges = models.PositiveIntegerField(default=0, help_text="how many times the gateway charged this order")
    emailed = models.PositiveIntegerField(default=0, help_text="how many emails reached the customer")

    class Meta:
        ordering = ("org_id", "number")
        constraints = [models.UniqueConstraint(fields=("org_id", "number"), name="shop_order_org_number_uniq")]

    def __str__(self) -> str:
        return f"order {self.number} ({self.org_id})"
