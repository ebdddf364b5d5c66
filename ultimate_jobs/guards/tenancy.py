"""Tenant-owned models: a queryset and an abstract model that check every row against the ambient org.

Outside any scope (a migration, the admin, a shell) the guard is off. Inside a job run the executor
installs the job's declared tenant: a row of another org is ``X_TENANCY_ACTOR_MISMATCH``, and a
tenant-scoped read in a ``tenant="none"`` job outside :func:`cross_tenant` is
``X_TENANCY_ACTOR_ORG_REQUIRED``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from functools import reduce
from operator import or_
from typing import Any, ClassVar, TypeVar

from asgiref.sync import sync_to_async
from django.db import models
from django.db.models.signals import class_prepared

from ..core.scope import (
    UNGUARDED,
    Actor,
    acting_as,
    check_org,
    cross_tenant,
    current_actor,
    current_tenant,
    guarded_org,
    guarded_scope_org,
)

T = TypeVar("T")

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
    (``values()``, ``values_list()``, ``count()``, ``exists()``, ``aggregate()``, ``iterator()``,
    ``aiterator()``), a read that locks (``select_for_update()``), a bulk write (``update()``,
    ``delete()``) and a cascade the deletion collector deletes without loading it first ask whether
    the selection reaches another org's rows. The org lives in the model's ``TENANT_FIELD`` (default
    ``org_id``).
    """

    def _tenant_field(self) -> str:
        return str(getattr(self.model, "TENANT_FIELD", "org_id"))

    def _guard_selection(self) -> None:
        """Refuse when the (unsliced) selection reaches a row of another org, or there is no org — asked
        before the statement runs, by a probe that locks nothing. A combined query (``union()``,
        ``intersection()``, ``difference()``) takes no further filter, so each of its parts is asked."""
        org = guarded_scope_org()
        if org is UNGUARDED:
            return
        if org is None:
            check_org(None, model=self.model.__name__)
            return
        for part in _parts(self.query):
            model = part.model
            if model is None or not issubclass(model, TenantScopedModel):
                continue  # a part over a model that is not tenant-scoped: row-level security is its guard
            field = model.TENANT_FIELD
            probe: models.QuerySet[Any] = models.QuerySet(model, query=part.chain(), using=self.db)
            probe.query.clear_limits()
            probe.query.clear_ordering(force=True)
            probe.query.select_for_update = False  # select_for_update(): the probe must not lock what it finds
            other = probe.exclude(**{field: org}).values_list(field, flat=True)[:1]
            for org_id in models.QuerySet.iterator(other):
                check_org(org_id, model=model.__name__)

    def _fetch_all(self) -> None:
        if self._result_cache is None and (
            self._iterable_class is not models.query.ModelIterable or self.query.select_for_update
        ):
            # select_for_update(): refuse BEFORE the statement, which would lock another org's row for the
            # rest of the transaction even though the row is refused as it loads
            self._guard_selection()
        super()._fetch_all()
        if self._iterable_class is models.query.ModelIterable:
            field, name = self._tenant_field(), self.model.__name__
            for row in self._result_cache or ():
                check_org(getattr(row, field), model=name)

    def only(self, *fields: Any) -> TenantScopedQuerySet:
        """``only()`` that loads the org too: a row must carry its org to be checked (the deletion collector
        loads the rows of a cascade with ``only()`` of the keys that point at them)."""
        if fields and fields != (None,):
            fields = (*fields, self._tenant_field())
        return super().only(*fields)

    def defer(self, *fields: Any) -> TenantScopedQuerySet:
        """``defer()`` that never defers the org, for the same reason."""
        field = self._tenant_field()
        return super().defer(*(name for name in fields if name != field))

    def iterator(self, chunk_size: int | None = None) -> Iterator[Any]:
        self._guard_selection()
        return super().iterator(chunk_size=chunk_size)

    async def aiterator(self, chunk_size: int = 2000) -> AsyncIterator[Any]:
        # Django's aiterator() runs the query through neither iterator() nor _fetch_all()
        await sync_to_async(self._guard_selection)()
        async for row in super().aiterator(chunk_size=chunk_size):
            yield row

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

    def _raw_delete(self, using: str | None) -> int:
        """The deletion collector's fast path: a cascade it deletes with one statement, loading no row
        (``Parent.delete()`` where this model's rows point at the parent and nothing points at them). In
        a run with no org it is ``X_TENANCY_ACTOR_ORG_REQUIRED``; in a run of an org, a cascade that
        reaches another org's rows is ``X_TENANCY_ACTOR_MISMATCH`` — asked of the stored rows, so row-level
        security, which would hide them and leave the parent's delete to fail on their foreign key, does
        not turn the refusal into a database error."""
        org = guarded_org()
        if org is not None:
            field = self._tenant_field()
            probe: models.QuerySet[Any] = models.QuerySet(self.model, query=self.query.chain(), using=using)
            other = probe.exclude(**{field: org}).values_list(field, flat=True)[:1]
            for org_id in _stored(lambda: list(other)):
                check_org(org_id, model=self.model.__name__)
        count: int = super()._raw_delete(using)
        return count

    def bulk_create(self, objs: Iterable[Any], *args: Any, **kwargs: Any) -> list[Any]:
        objs = list(objs)
        field, name = self._tenant_field(), self.model.__name__
        for obj in objs:
            check_org(getattr(obj, field), model=name)
        if kwargs.get("update_conflicts") and objs:
            self._refuse_conflicts_elsewhere(objs, kwargs.get("unique_fields"))
        return super().bulk_create(objs, *args, **kwargs)

    def bulk_update(self, objs: Iterable[Any], fields: Iterable[str], batch_size: int | None = None) -> int:
        objs = list(objs)
        field, name = self._tenant_field(), self.model.__name__
        for obj in objs:
            check_org(getattr(obj, field), model=name)
        org = guarded_org()
        if org is not None and objs:
            elsewhere = _unguarded(self.model, self.db).filter(pk__in=[obj.pk for obj in objs]).exclude(**{field: org})
            if _stored(elsewhere.exists):  # the UPDATE acts on the stored rows: refuse, never a silent no-op
                check_org(None, model=name)
        return super().bulk_update(objs, fields, batch_size=batch_size)

    def _refuse_conflicts_elsewhere(self, objs: Sequence[Any], unique_fields: Sequence[str] | None) -> None:
        """``bulk_create(update_conflicts=True)`` updates the STORED row a new one conflicts with: refuse
        when any such row belongs to another org (its ``ON CONFLICT DO UPDATE`` would move it)."""
        org = guarded_org()
        if org is None:
            return
        fields = list(unique_fields or ()) or [self.model._meta.pk.attname]
        fields = [self.model._meta.pk.attname if f == "pk" else f for f in fields]
        keys = [{f: getattr(obj, _attname(self.model, f)) for f in fields} for obj in objs]
        match = reduce(or_, (models.Q(**key) for key in keys))
        elsewhere = _unguarded(self.model, self.db).filter(match).exclude(**{self._tenant_field(): org})
        if _stored(elsewhere.exists):
            check_org(None, model=self.model.__name__)


def _parts(query: Any) -> Iterator[Any]:
    """The queries a combined query (``union()`` and the like) is made of, at any depth; else itself."""
    if query.combinator:
        for part in query.combined_queries:
            yield from _parts(part)
    else:
        yield query


def _attname(model: type[models.Model], name: str) -> str:
    """The attribute a field's value lives in on an instance (``org_id`` for a ``ForeignKey`` ``org``)."""
    return str(getattr(model._meta.get_field(name), "attname", name))


def _unguarded(model: type[models.Model], using: str | None) -> models.QuerySet[Any]:
    """A plain queryset over ``model`` — for the guard's own probes of stored rows, never handed out."""
    return models.QuerySet(model, using=using)


def _stored(probe: Callable[[], T]) -> T:
    """Run the guard's own probe of a stored row where row-level security does not hide other orgs'
    rows: a write that misses must be told apart from a row of another org."""
    return cross_tenant("the tenant guard's probe of the stored row", probe)


class TenantScopedModel(models.Model):
    """An abstract base for tenant-owned models, guarded in three places:

    - every row loaded from the database, whatever loaded it (the manager, the base manager, a related
      descriptor, ``select_related``, ``prefetch_related``, ``refresh_from_db``, ``raw()``, async
      iteration), is checked as it is built (``from_db``);
    - the manager's reads that build no rows (``values()``, ``count()``, ``aggregate()`` …), reads that
      lock (``select_for_update()``, asked before the statement locks anything), bulk writes, and the
      deletion collector's one-statement cascades ask first whether the selection reaches another org's
      rows — the base manager is the guarded one too, so the collector uses it;
    - ``save()`` of an existing row updates only where the STORED org is the acting org, ``delete()``
      deletes only such a row, and ``bulk_create(update_conflicts=True)`` refuses a conflict with
      another org's row — each a refusal (``X_TENANCY_ACTOR_MISMATCH``), never a silent insert or no-op.

    >>> class Order(TenantScopedModel):
    ...     org_id = models.CharField(max_length=64)
    """

    TENANT_FIELD: ClassVar[str] = "org_id"

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        abstract = True

    @classmethod
    def from_db(cls, db: str | None, field_names: Any, values: Any, **kwargs: Any) -> Any:
        # Django 6.1 passes fetch_mode= (and warns about a from_db() that cannot take it); 5.2 passes none
        instance = super().from_db(db, field_names, values, **kwargs)
        if guarded_org() is not None:
            attname = _attname(cls, cls.TENANT_FIELD)
            # a row loaded without its org (raw() SQL without the column; only()/defer() keep it) is not checkable
            org = instance.__dict__.get(attname)
            check_org(org, model=cls.__name__)
        return instance

    def save(self, *args: Any, **kwargs: Any) -> None:
        check_org(getattr(self, self.TENANT_FIELD), model=type(self).__name__)
        super().save(*args, **kwargs)

    def _do_update(self, base_qs: Any, *args: Any, **kwargs: Any) -> Any:
        # Django 5.2 answers a bool, 6.1 the returned rows (a list, empty when nothing was updated): passed on
        org = guarded_org()
        if org is None:
            return super()._do_update(base_qs, *args, **kwargs)
        # the UPDATE carries the org in its WHERE: a pk of another org's row updates nothing ...
        updated = super()._do_update(base_qs.filter(**{self.TENANT_FIELD: org}), *args, **kwargs)
        if not updated and _stored(_unguarded(type(self), base_qs.db).filter(pk=self.pk).exists):
            check_org(None, model=type(self).__name__)  # ... and is refused, never turned into an insert
        return updated

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        name = type(self).__name__
        check_org(getattr(self, self.TENANT_FIELD), model=name)
        org = guarded_org()
        if org is not None and self.pk is not None:
            stored = _unguarded(type(self), self._state.db).filter(pk=self.pk).values_list(self.TENANT_FIELD, flat=True)
            for stored_org in _stored(lambda: list(stored)):
                check_org(stored_org, model=name)
        return super().delete(*args, **kwargs)


def _use_the_guarded_base_manager(sender: type[models.Model], **_: Any) -> None:
    """Every concrete tenant-scoped model's base manager (related descriptors, ``refresh_from_db``, the
    deletion collector) is its guarded ``objects``, unless the model names one itself."""
    if issubclass(sender, TenantScopedModel) and not sender._meta.abstract and sender._meta.base_manager_name is None:
        sender._meta.base_manager_name = "objects"


class_prepared.connect(_use_the_guarded_base_manager)
