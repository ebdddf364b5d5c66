"""The tenant guard, attacked through the ORM: a job acting under org A against rows of org A and B.

Every test builds the rows outside any scope (as a migration or the admin would), then tries to reach
org B's row from inside ``acting_as(Actor(org_id="org-A"))`` — the scope the executor installs for a
job of org A — and asserts that nothing of org B's comes back and nothing of it changes.

Each test runs twice: once with the Python guard alone (what every driver has; the connection's role is
a superuser, which Postgres exempts from row-level security), where every attack must be REFUSED with
``X_TENANCY_ACTOR_MISMATCH`` naming no other org; and once as the application's non-superuser role
with row-level security on, where a read may instead come back without org B's rows — an answer that
must not change when org B's rows do — and a write by primary key is still refused.

Paths only the database can close (a subquery, ``Exists``, joins from an unscoped model, raw SQL) are in
test_row_security.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db.models import Sum

from tests.secapp.models import Bucket, Item, Note
from tests.security.attacks import A, B, denied, refused, stored
from ultimate_jobs.core.scope import Actor, acting_as, cross_tenant

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


# -- writes by primary key: the SQL acts on the stored row, so the check does too ---------------


def test_save_of_another_orgs_pk_is_refused_and_moves_nothing(rows: dict[str, Any]) -> None:
    theirs = rows[B]["item"]
    forged = Item(pk=theirs.pk, org_id=A, bucket=rows[A]["bucket"], secret="overwritten", total=0)
    refused(forged.save)
    assert stored(theirs) == (B, "secret of org-B", 10)


def test_delete_of_another_orgs_pk_is_refused_and_deletes_nothing(rows: dict[str, Any]) -> None:
    theirs = rows[B]["item"]
    refused(Item(pk=theirs.pk, org_id=A, bucket_id=rows[A]["bucket"].pk).delete)
    assert Item.objects.filter(pk=theirs.pk).exists() and Note.objects.filter(item=theirs).exists()


def test_bulk_create_updating_on_conflict_with_another_orgs_row_is_refused(rows: dict[str, Any]) -> None:
    theirs = rows[B]["item"]
    forged = Item(pk=theirs.pk, org_id=A, bucket=rows[A]["bucket"], secret="moved", total=0)
    refused(
        lambda: Item.objects.bulk_create(
            [forged], update_conflicts=True, unique_fields=["id"], update_fields=["org_id", "secret", "total"]
        )
    )
    assert stored(theirs) == (B, "secret of org-B", 10)


def test_bulk_update_of_another_orgs_row_is_refused(rows: dict[str, Any]) -> None:
    theirs = rows[B]["item"]
    theirs.total = 0
    refused(lambda: Item.objects.bulk_update([theirs], ["total"]))
    assert stored(theirs) == (B, "secret of org-B", 10)


# -- reads that skip the manager: checked as each row is built ----------------------------------


@pytest.mark.parametrize(
    "why",
    [
        "the base manager",
        "the base manager's values()",
        "refresh_from_db",
        "a related descriptor from an unscoped model",
        "select_related from an unscoped model",
        "prefetch_related from an unscoped model",
        "a reverse relation",
        "raw()",
        "async iteration",
    ],
)
def test_reads_that_skip_the_manager_are_denied(rows: dict[str, Any], guard: str, why: str) -> None:
    theirs, note = rows[B]["item"], rows[B]["note"]
    bucket_b = rows[B]["bucket"]

    async def rows_async() -> list[Any]:
        return [row async for row in Item.objects.filter(org_id=B)]

    attacks: dict[str, Callable[[], Any]] = {
        "the base manager": lambda: list(Item._base_manager.filter(org_id=B)),
        "the base manager's values()": lambda: list(Item._base_manager.filter(org_id=B).values("secret")),
        "refresh_from_db": lambda: Item(pk=theirs.pk, org_id=A).refresh_from_db(),
        "a related descriptor from an unscoped model": lambda: Note.objects.get(pk=note.pk).item,
        "select_related from an unscoped model": lambda: [n.item for n in Note.objects.select_related("item")],
        "prefetch_related from an unscoped model": lambda: [n.item for n in Note.objects.prefetch_related("item")],
        "a reverse relation": lambda: list(Bucket(pk=bucket_b.pk, org_id=A).items.all()),
        "raw()": lambda: list(Item.objects.raw("SELECT * FROM secapp_item WHERE org_id = %s", [B])),
        # async_to_sync: the ORM's thread-sensitive calls come back to this thread and its connection
        "async iteration": lambda: async_to_sync(rows_async)(),
    }
    denied(attacks[why], guard, rows)


def test_a_row_loaded_without_its_org_is_refused(rows: dict[str, Any]) -> None:
    """only()/defer() without the org column: the row cannot be checked, so it is not handed out."""
    refused(lambda: list(Item.objects.raw("SELECT id, secret FROM secapp_item")))


# -- what the guard refused before, kept refused --------------------------------------------------


@pytest.mark.parametrize(
    "why",
    ["get", "filter", "values", "values_list", "in_bulk", "count", "exists", "aggregate", "iterator", "update"],
)
def test_the_manager_denies_another_orgs_rows(rows: dict[str, Any], guard: str, why: str) -> None:
    theirs = rows[B]["item"]
    attacks: dict[str, Callable[[], Any]] = {
        "get": lambda: Item.objects.get(pk=theirs.pk),
        "filter": lambda: list(Item.objects.filter(org_id=B)),
        "values": lambda: list(Item.objects.values("secret")),
        "values_list": lambda: list(Item.objects.values_list("secret", flat=True)),
        "in_bulk": lambda: Item.objects.in_bulk([theirs.pk]),
        "count": lambda: Item.objects.count(),
        "exists": lambda: Item.objects.filter(org_id=B).exists(),
        "aggregate": lambda: Item.objects.aggregate(Sum("total")),
        "iterator": lambda: list(Item.objects.iterator()),
        "update": lambda: Item.objects.filter(pk=theirs.pk).update(total=0),
    }
    denied(attacks[why], guard, rows)
    assert stored(theirs) == (B, "secret of org-B", 10)


# -- the acting org's own rows ---------------------------------------------------------------------


def test_a_run_still_reads_and_writes_its_own_rows_through_every_path(rows: dict[str, Any]) -> None:
    mine, note = rows[A]["item"], rows[A]["note"]
    with acting_as(Actor(org_id=A)):
        assert [i.pk for i in Item._base_manager.filter(org_id=A)] == [mine.pk]
        assert Note.objects.select_related("item").get(pk=note.pk).item.secret == "secret of org-A"
        assert [n.item.pk for n in Note.objects.filter(pk=note.pk).prefetch_related("item")] == [mine.pk]
        fresh = Item(pk=mine.pk, org_id=A)
        fresh.refresh_from_db()
        assert fresh.secret == "secret of org-A"
        fresh.total = 11
        fresh.save()
        Item.objects.bulk_create(
            [Item(pk=mine.pk, org_id=A, bucket_id=mine.bucket_id, secret="renamed", total=12)],
            update_conflicts=True,
            unique_fields=["id"],
            update_fields=["secret", "total"],
        )
        assert [i.secret for i in Item.objects.raw("SELECT * FROM secapp_item WHERE org_id = %s", [A])] == ["renamed"]
        Item.objects.get(pk=mine.pk).delete()
    assert not Item.objects.filter(pk=mine.pk).exists()
    assert stored(rows[B]["item"]) == (B, "secret of org-B", 10)


def test_cross_tenant_lifts_every_check(rows: dict[str, Any]) -> None:
    theirs = rows[B]["item"]
    with acting_as(Actor(org_id=A)):
        loaded = cross_tenant("a support fix across orgs", lambda: Item._base_manager.get(pk=theirs.pk))
        assert loaded.secret == "secret of org-B"
        cross_tenant("a support fix across orgs", lambda: Item.objects.filter(pk=theirs.pk).update(total=9))
    assert stored(theirs) == (B, "secret of org-B", 9)
