"""The bench's Django app: it exists so autodiscovery imports ``bench/jobs.py``."""

from __future__ import annotations

from django.apps import AppConfig


class BenchConfig(AppConfig):
    name = "bench"
    label = "bench"
    verbose_name = "ultimate_jobs benchmarks"
    default_auto_field = "django.db.models.BigAutoField"
