"""Tenant-owned models: a queryset and an abstract model that check every row against the ambient org.

Outside any scope (a migration, the admin, a shell) the guard is off. Inside a job run the executor
installs the job's declared tenant: a row of another org is ``X_TENANCY_ACTOR_MISMATCH``, and a
tenant-scoped read in a ``tenant="none"`` job outside :func:`cross_tenant` is
``X_TENANCY_ACTOR_ORG_REQUIRED``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

from django.db import models

from .context import Actor, _scope, acting_as, check_org, cross_tenant, current_actor, current_tenant

__all__ = [
    "Actor",
    "TenantScopedModel",
    "TenantScopedQuerySet",
    "acting_as",
    "check_org",
    "cross_tenant",
    "current_actor",
    "current_tenant",
]


class TenantScopedQuerySet(models.QuerySet[Any]):
    """A queryset every read and write of which is checked against the ambient org.

    Model rows are checked as they load (no extra query); a read that yields no model rows
    (``values()``, ``values_list()``, ``count()``, ``exists()``, ``aggregate()``, ``iterator()``) and a
    bulk write (``update()``, ``delete()``) first asks whether the selection reaches another org's rows.
    The org lives in the model's ``TENANT_FIELD`` (default ``org_id``).
    """

    def _tenant_field(self) -> str:
        return str(getattr(self.model, "TENANT_FIELD", "org_id"))

    def _guard_selection(self) -> None:
        """Refuse when the (unsliced) selection reaches a row of another org, or there is no org."""
        scope = _scope.get()
        if scope is None or scope.cross_tenant_reason is not None:
            return
        name = self.model.__name__
        org = scope.actor.org_id
        if org is None:
            check_org(None, model=name)
            return
        field = self._tenant_field()
        probe: models.QuerySet[Any] = models.QuerySet(self.model, query=self.query.chain(), using=self.db)
        probe.query.clear_limits()
        probe.query.clear_ordering(force=True)
        other = probe.exclude(**{field: org}).values_list(field, flat=True)[:1]
        for org_id in models.QuerySet.iterator(other):
            check_org(org_id, model=name)

    def _fetch_all(self) -> None:
        if self._result_cache is None and self._iterable_class is not models.query.ModelIterable:
            self._guard_selection()
        super()._fetch_all()
        if self._iterable_class is models.query.ModelIterable:
            field, name = self._tenant_field(), self.model.__name__
            for row in self._result_cache or ():
                check_org(getattr(row, field), model=name)

    def iterator(self, chunk_size: int | None = None) -> Iterator[Any]:
        self._guard_selection()
        return super().iterator(chunk_size=chunk_size)

    def count(self) -> int:
        self._guard_selection()
        return super().count()

    def exists(self) -> bool:
        self._guard_selection()
        return super().exists()

    def aggregate(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self._guard_selection()
        return super().aggregate(*args, **kwargs)

    def update(self, **kwargs: Any) -> int:
        self._guard_selection()
        field = self._tenant_field()
        if field in kwargs:
            check_org(kwargs[field], model=self.model.__name__)
        return super().update(**kwargs)

    def delete(self) -> tuple[int, dict[str, int]]:
        self._guard_selection()
        return super().delete()

    def bulk_create(self, objs: Iterable[Any], *args: Any, **kwargs: Any) -> list[Any]:
        objs = list(objs)
        field = self._tenant_field()
        for obj in objs:
            check_org(getattr(obj, field), model=self.model.__name__)
        return super().bulk_create(objs, *args, **kwargs)


class TenantScopedModel(models.Model):
    """An abstract base for tenant-owned models: the manager guards reads, ``save()``/``delete()`` guard writes."""

    TENANT_FIELD: ClassVar[str] = "org_id"

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        check_org(getattr(self, self.TENANT_FIELD), model=type(self).__name__)
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        check_org(getattr(self, self.TENANT_FIELD), model=type(self).__name__)
        return super().delete(*args, **kwargs)
