"""The side-effect ledger: one row every time a chaos job's step does its work."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class Effect(models.Model):
    """A step's side effect, as the worker process that ran it wrote it: in a ``step.run``, committed at once
    (autocommit), before the step's checkpoint; in a ``step.atomic``, in the checkpoint's transaction. Two
    rows for one ``(job_id, step)`` are a doubled effect."""

    job_id = models.UUIDField(db_index=True)
    step = models.CharField(max_length=32)
    worker_pid = models.IntegerField()
    at = models.DateTimeField(default=timezone.now)
