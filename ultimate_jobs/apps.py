"""The Django app: autodiscovery of ``<app>/jobs.py`` and ``<app>/tasks.py``, the outbox ``OUTBOX`` asks
for, the settings check and the migrations check (a database check)."""

from __future__ import annotations

import importlib
from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.utils.module_loading import autodiscover_modules


class UltimateJobsConfig(AppConfig):
    """Declares the app's own retention sweep and hourly task (:mod:`ultimate_jobs.features.retention`), imports every
    installed app's ``jobs`` and ``tasks`` modules, then ``ULTIMATE_JOBS['MODULES']``; installs the outbox
    when ``ULTIMATE_JOBS['OUTBOX']`` is ``"optional"`` or ``"required"``."""

    name = "ultimate_jobs"
    label = "ultimate_jobs"
    verbose_name = "Ultimate jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from .conf import read_settings
        from .features import retention  # noqa: F401 — declares the app's own sweep (x.purge) and its hourly task
        from .outbox.boot import install_outbox_from_settings

        autodiscover_modules("jobs", "tasks")
        values, _ = read_settings()  # a bad setting is the system check's to report
        for module in values.get("modules", ()):
            importlib.import_module(module)
        install_outbox_from_settings()
        _add_django_tasks_source()
        checks.register(check_settings, "ultimate_jobs")
        checks.register(check_migrations, checks.Tags.database)
        from .checks import row_security_deploy_messages

        checks.register(row_security_deploy_messages, "ultimate_jobs", checks.Tags.security, deploy=True)
        from .guards import row_security

        row_security.install()


def _add_django_tasks_source() -> None:
    """A worker runs the Django tasks a ``JobsBackend`` queued: the registry asks the backend's module for
    the names no ``@job`` holds. Without ``django.tasks`` (Django 5.2 without the backport) there are none."""
    from .core import registry

    try:
        from .django_tasks import TASKS_SOURCE
    except ImportError:
        return
    registry.add_source(TASKS_SOURCE)


def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``manage.py check`` fails on a setting that cannot mean what it says (:mod:`ultimate_jobs.checks`)
    rather than on the fourth attempt."""
    from .checks import settings_messages

    return settings_messages()


def check_migrations(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``manage.py check --database <alias>`` (and ``migrate``) warns when the jobs database lacks
    ultimate_jobs migrations (:func:`ultimate_jobs.checks.migration_messages`)."""
    from .checks import migration_messages

    return migration_messages(databases)
