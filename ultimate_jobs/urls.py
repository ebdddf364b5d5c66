"""The app's URLs: ``path("jobs/", include("ultimate_jobs.urls"))`` in the project's urlconf.

- ``metrics`` — the Prometheus exposition (:mod:`.metrics_view`);
- ``queues``, ``job/<id>``, ``dead-letters`` — read-only JSON for staff (:mod:`.views`).
"""

from django.urls import path

from .metrics_view import metrics_view
from .views import dead_letters_view, job_view, queues_view

app_name = "ultimate_jobs"

urlpatterns = [
    path("metrics", metrics_view, name="metrics"),
    path("queues", queues_view, name="queues"),
    # Any text after job/ reaches the view, so a malformed id is a JSON 400 with its code, not a bare 404.
    path("job/<path:job_id>", job_view, name="job"),
    path("dead-letters", dead_letters_view, name="dead-letters"),
]
