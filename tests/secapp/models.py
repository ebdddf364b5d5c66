"""Two tenant-scoped models with a relation between them, and an unscoped model pointing into them."""

from __future__ import annotations

from django.db import models

from ultimate_jobs.guards.tenancy import TenantScopedModel


class Bucket(TenantScopedModel):
    org_id = models.CharField(max_length=64)
    name = models.CharField(max_length=64)


class Item(TenantScopedModel):
    org_id = models.CharField(max_length=64)
    bucket = models.ForeignKey(Bucket, on_delete=models.CASCADE, related_name="items")
    secret = models.CharField(max_length=64)
    total = models.IntegerField(default=0)


class Note(models.Model):
    """Not tenant-scoped: a way into Item rows that does not start at Item's manager."""

    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="notes")
    text = models.CharField(max_length=64)


class Post(models.Model):
    """Not tenant-scoped: rows for a backfill to sweep (tests/postgres/test_backfills.py)."""

    title = models.CharField(max_length=64)
    slug = models.CharField(max_length=64, default="")
