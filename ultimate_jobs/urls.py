"""The app's URLs: ``path("jobs/", include("ultimate_jobs.urls"))`` in the project's urlconf.

- ``metrics`` — the Prometheus exposition (:mod:`.metrics_view`);
- ``list``, ``job/<id>``, ``dead-letters``, ``queues``, ``workers``, ``tasks``, ``stats``, ``dashboard``,
  ``manifest``, ``outbox`` — read-only JSON for staff, one per read of ``manage.py jobs`` (:mod:`.views`);
- ``backfills`` — the backfill ledger, as ``manage.py jobs_backfill --list --json`` prints it.
"""

from django.urls import path

from .integration import views
from .integration.metrics_view import metrics_view

app_name = "ultimate_jobs"

urlpatterns = [
    path("metrics", metrics_view, name="metrics"),
    path("list", views.list_view, name="list"),
    # Any text after job/ reaches the view, so a malformed id is a JSON 400 with its code, not a bare 404.
    path("job/<path:job_id>", views.job_view, name="job"),
    path("dead-letters", views.dead_letters_view, name="dead-letters"),
    path("queues", views.queues_view, name="queues"),
    path("workers", views.workers_view, name="workers"),
    path("rates", views.rates_view, name="rates"),
    path("tasks", views.tasks_view, name="tasks"),
    path("stats", views.stats_view, name="stats"),
    path("dashboard", views.dashboard_view, name="dashboard"),
    path("manifest", views.manifest_view, name="manifest"),
    path("outbox", views.outbox_view, name="outbox"),
    path("backfills", views.backfills_view, name="backfills"),
]
