"""The backfill the SIGKILL test runs in real worker processes (``ULTIMATE_JOBS['MODULES']`` of
:mod:`tests.e2e.backfill_settings`): every ``tests.secapp.Post`` row's slug set to ``swept``, one
``e2e_effects`` row per page handled (``page:<first pk>``, the worker's pid, the attempt)."""

from __future__ import annotations

import os
from typing import Any

from django.db import connection

from tests.secapp.models import Post
from ultimate_jobs import backfill
from ultimate_jobs.core.signals import CancelSignal

QUEUE = "e2e-pg"
BATCH = 1_000


def sweep_page(rows: list[Post], signal: CancelSignal) -> None:
    Post.objects.filter(pk__in=[p.pk for p in rows]).update(slug="swept")
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO e2e_effects (job_key, worker_pid, attempt, at) VALUES (%s, %s, NULL, now())",
            [f"page:{rows[0].pk}", os.getpid()],
        )


def all_posts(ctx: Any) -> Any:
    return Post.objects.all()


sweep_posts = backfill(
    name="e2e-sweep-posts",
    tenant="none",
    queue=QUEUE,
    batch=BATCH,
    rate=20,  # pages a second: the SIGKILL test stops A mid-pass with 1.5 s of pages still ahead of it
    retry={"attempts": 3},
    source=all_posts,
    handle=sweep_page,
)
