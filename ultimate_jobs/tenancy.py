"""Tenant-owned models: a queryset and an abstract model that check every row against the ambient org.

Outside any scope (a migration, the admin, a shell) the guard is off. Inside a job run the executor
installs the job's declared tenant: a row of another org is ``X_TENANCY_ACTOR_MISMATCH``, and a
tenant-scoped read in a ``tenant="none"`` job outside :func:`cross_tenant` is
``X_TENANCY_ACTOR_ORG_REQUIRED``.
"""

from __future__ import annotations

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
    """A queryset whose rows are checked against the ambient org. Set ``tenant_field`` on the model's
    manager (``TenantScopedManager(tenant_field="org_id")``) or as ``TENANT_FIELD`` on the model."""

    def _tenant_field(self) -> str:
        return str(getattr(self.model, "TENANT_FIELD", "org_id"))

    def _fetch_all(self) -> None:
        super()._fetch_all()  # type: ignore[misc]
        field = self._tenant_field()
        for row in self._result_cache or ():  # type: ignore[attr-defined]
            value = row.get(field) if isinstance(row, dict) else getattr(row, field, None)
            if value is not None or not isinstance(row, dict | tuple):
                check_org(value, model=self.model.__name__)

    def _guard_bulk(self) -> None:
        scope = _scope.get()
        if scope is None or scope.cross_tenant_reason is not None:
            return
        field = self._tenant_field()
        if scope.actor.org_id is None:
            check_org(None, model=self.model.__name__)
        other = self.exclude(**{field: scope.actor.org_id}).values_list(field, flat=True)[:1]
        for org_id in models.QuerySet.iterator(other):
            check_org(org_id, model=self.model.__name__)

    def update(self, **kwargs: Any) -> int:
        self._guard_bulk()
        field = self._tenant_field()
        if field in kwargs:
            check_org(kwargs[field], model=self.model.__name__)
        return super().update(**kwargs)

    def delete(self) -> tuple[int, dict[str, int]]:
        self._guard_bulk()
        return super().delete()

    def count(self) -> int:
        self._guard_bulk()
        return super().count()


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
