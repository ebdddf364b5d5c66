"""``manage.py check``: Django's system check, then one line saying which job driver the settings resolve
to (``DRIVER`` unset follows the ``DATABASE`` alias: ``postgres`` on PostgreSQL, ``sqlite`` on SQLite)."""

from __future__ import annotations

from typing import Any

from django.core.management.commands.check import Command as DjangoCheck

from ...conf import driver_resolution


class Command(DjangoCheck):
    def handle(self, *app_labels: Any, **options: Any) -> None:
        super().handle(*app_labels, **options)
        if options.get("verbosity", 1) >= 1:
            self.stdout.write(driver_resolution())
