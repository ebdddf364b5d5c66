"""List filters and the paginator of the job lists, built for a big ``x_jobs``.

No filter asks the table for its choices: a ``SELECT DISTINCT queue`` over millions of rows on every
page load is the thing to avoid. States are the fixed eight, queues and names come from the
declarations, and the tenant — unbounded — is typed in. The paginator counts at most
:data:`COUNT_CAP` rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.views.main import PAGE_VAR, ChangeList
from django.core.paginator import Paginator
from django.db import models
from django.http import HttpRequest
from django.utils.functional import cached_property

from .. import registry
from ..definition import JobHandle
from ..operator.queues import declared_queues

COUNT_CAP = 10_000


if TYPE_CHECKING:
    _Paginator = Paginator[Any]
else:  # Paginator is generic for the type checker only
    _Paginator = Paginator


class CappedPaginator(_Paginator):
    """Counts at most ``COUNT_CAP + 1`` rows (``SELECT count(*) FROM (… LIMIT n)``), so an unfiltered page
    of a table with millions of rows costs a bounded index walk; the page says "10000+" past the cap."""

    @cached_property
    def count(self) -> int:
        rows = self.object_list
        if isinstance(rows, models.QuerySet):
            return rows[: COUNT_CAP + 1].count()
        return len(rows)


class _ExactFilter(admin.SimpleListFilter):
    """Equality on one column; the choices come from :meth:`known`, never from the table."""

    def known(self) -> set[str]:
        raise NotImplementedError

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = self.known()
        current = self.value()
        if current:
            names.add(current)  # a queue nothing declares now still shows as selected
        return [(n, n) for n in sorted(names)]

    def queryset(self, request: HttpRequest, queryset: models.QuerySet[Any]) -> models.QuerySet[Any]:
        value = self.value()
        return queryset.filter(**{str(self.parameter_name): value}) if value else queryset


class QueueFilter(_ExactFilter):
    """By queue: every declared queue (``x_jobs_state_queue_idx`` carries it with a state)."""

    title = "queue"
    parameter_name = "queue"

    def known(self) -> set[str]:
        return set(declared_queues())


class JobNameFilter(_ExactFilter):
    """By job name: every job this process declares."""

    title = "job"
    parameter_name = "name"

    def known(self) -> set[str]:
        return {h.name for h in registry.registered("job") if isinstance(h, JobHandle)}


class TenantFilter(admin.SimpleListFilter):
    """By tenant: an exact tenant id typed into a box (tenants are unbounded; no list of them)."""

    title = "tenant"
    parameter_name = "tenant_id"
    template = "admin/ultimate_jobs/filters/input.html"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("", "")]  # one dummy choice: a filter with no lookups is not shown

    def queryset(self, request: HttpRequest, queryset: models.QuerySet[Any]) -> models.QuerySet[Any]:
        value = (self.value() or "").strip()
        return queryset.filter(tenant_id=value) if value else queryset

    def choices(self, changelist: ChangeList) -> Iterator[Any]:
        keep = [(k, v) for k, v in changelist.params.items() if k not in (self.parameter_name, PAGE_VAR)]
        yield {  # the admin's choice keys, plus the fields the input template needs
            "selected": self.value() is None,
            "query_string": changelist.get_query_string(remove=[self.parameter_name]),
            "display": "All",
            "hidden": keep,
            "value": self.value() or "",
        }
