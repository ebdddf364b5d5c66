"""The bench's one table: the rows the backfill case sweeps (``bench_rows``)."""

from __future__ import annotations

from django.db import models


class BenchRow(models.Model):
    """One row a backfill page updates."""

    value = models.IntegerField(default=0)

    class Meta:
        db_table = "bench_rows"
