"""``/metrics``: the Prometheus text exposition of the queue gauges and this process's counters.

Include it with ``path("jobs/", include("ultimate_jobs.urls"))``. Who may read it
(``settings.ULTIMATE_JOBS``):

- by default, a logged-in staff user only — queue names and depths are the app's business;
- ``METRICS_TOKEN = "<secret>"``: also a scraper sending ``Authorization: Bearer <secret>``;
- ``METRICS_PUBLIC = True``: anyone (a scrape from inside the cluster, the usual Prometheus setup).
"""

from __future__ import annotations

import hmac
import logging

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from prometheus_client.exposition import choose_encoder

from ..conf import jobs_settings
from ..core.logs import log_event
from ..errors import UltimateError
from ..features.metrics import metrics_registry

TEXT = "text/plain; charset=utf-8"


@never_cache
@require_safe
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The five series (and the client's process series) for one scrape; 403 (401 where a bearer token
    is configured) for a caller the settings do not admit, 503 when the queue stats cannot be read."""
    config = jobs_settings()
    if not config.metrics_public and not _admitted(request, config.metrics_token):
        if config.metrics_token is not None:
            denied = HttpResponse("a bearer token or a staff login is required\n", status=401, content_type=TEXT)
            denied["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return denied
        return HttpResponse(
            "staff only: log in, or set ULTIMATE_JOBS['METRICS_TOKEN']\n", status=403, content_type=TEXT
        )
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    try:
        body = encoder(metrics_registry())
    except (DatabaseError, UltimateError) as exc:  # a failed scrape, not a page of zeros: `up` tells
        log_event(logging.ERROR, "jobs.metrics.stats-failed", error=repr(exc))
        return HttpResponse("queue stats unavailable\n", status=503, content_type=TEXT)
    return HttpResponse(body, content_type=content_type)


def _admitted(request: HttpRequest, token: str | None) -> bool:
    user = getattr(request, "user", None)
    if user is not None and user.is_active and user.is_staff:
        return True
    if token is None:
        return False
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(credentials.strip().encode(), token.encode())
