"""The Django app: autodiscovery of ``<app>/jobs.py`` and ``<app>/tasks.py``, and the settings check."""

from __future__ import annotations

import importlib
from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.utils.module_loading import autodiscover_modules


class UltimateJobsConfig(AppConfig):
    """Imports every installed app's ``jobs`` and ``tasks`` modules, then ``ULTIMATE_JOBS['MODULES']``."""

    name = "ultimate_jobs"
    label = "ultimate_jobs"
    verbose_name = "Ultimate jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from .conf import jobs_settings
        from .errors import UltimateError

        autodiscover_modules("jobs", "tasks")
        try:
            modules = jobs_settings().modules
        except UltimateError:
            modules = ()  # the system check reports the bad setting
        for module in modules:
            importlib.import_module(module)
        checks.register(check_settings, "ultimate_jobs")
        from . import row_security

        row_security.install()


def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``manage.py check`` fails on a typo in ``ULTIMATE_JOBS`` rather than on the fourth attempt."""
    from .conf import jobs_settings
    from .errors import UltimateError

    try:
        jobs_settings()
    except UltimateError as exc:
        return [checks.Error(exc.message, id=f"ultimate_jobs.{exc.code}", obj="settings.ULTIMATE_JOBS")]
    return []
