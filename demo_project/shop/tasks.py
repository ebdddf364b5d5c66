"""The demo shop's cron tasks. ultimate_jobs imports this module at start-up (autodiscovery), and
``manage.py jobs_scheduler`` fires them.

- ``nightly_sales_report``: at 03:00 Berlin time, total the day that just ended. The task only names
  the work — one ``daily_sales_report`` job for that day; the job reads the database, the task never
  does (so ``describe()`` and the manifest stay free of I/O).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from ultimate_jobs import task

from .jobs import daily_sales_report

SHOP_ZONE = ZoneInfo("Europe/Berlin")


@task(cron="0 3 * * *", tz="Europe/Berlin", catch_up="skip")
def nightly_sales_report(occurrence_ms: int) -> list[tuple[Any, Any]]:
    """Yesterday's sales, by the shop's own calendar. ``catch_up="skip"``: a scheduler back from an
    outage reports the latest missed night only (each report is keyed by its day, so a missed night
    is one manual ``daily_sales_report.enqueue`` away)."""
    day = datetime.fromtimestamp(occurrence_ms / 1000, SHOP_ZONE).date() - timedelta(days=1)
    return [(daily_sales_report, {"day": day.isoformat()})]
