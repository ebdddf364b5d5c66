"""ORM paths that acted before the guard asked: the deletion collector's fast path, ``select_for_update()``,
and the guard's own probe of a ``union()``.

- ``Shelf.delete()`` — a model that is not tenant-scoped, whose tenant-scoped ``Label`` rows cascade with
  it — deletes the labels with one statement and loads none, so no row was checked: inside org A's run,
  and inside a run with no org, it deleted org B's labels.
- ``select_for_update()`` of org B's row was refused as the row loaded, after the statement had locked
  it for the rest of org A's transaction.
- ``union()`` followed by ``values_list()`` crashed in every run (``Calling QuerySet.exclude() after
  union()``): the guard filtered the combined query.

Each test runs twice, as in test_tenant_orm.py: with the Python guard alone (the superuser, which
Postgres exempts from row-level security), where another org's rows must be refused, and as the
application's role with row-level security on, where they may instead stay out of reach.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.core.exceptions import ObjectDoesNotExist
from django.db import IntegrityError, connection, models, transaction
from django.test.utils import isolate_apps

from tests.secapp.models import Bucket, Item
from tests.security.attacks import A, B, Hidden, denied, refused, stored
from ultimate_jobs.core.scope import Actor, acting_as, cross_tenant
from ultimate_jobs.drivers.postgres.wake import conninfo_for
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.guards.row_security import POLICY_NAME, SQL_CREATE_POLICY, SQL_POLICY_PREDICATE
from ultimate_jobs.guards.tenancy import TenantScopedModel

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


# -- 4. the deletion collector's fast path ----------------------------------------------------------

with isolate_apps("tests.secapp"):

    class Shelf(models.Model):
        """Not tenant-scoped: a shelf any org's labels may sit on."""

        name = models.CharField(max_length=64)

        class Meta:
            app_label = "secapp"
            db_table = "secapp_sidedoor_shelf"

    class Label(TenantScopedModel):
        """Tenant-scoped, pointing at a shelf, and pointed at by nothing: the collector deletes a shelf's
        labels with one statement and loads none of them."""

        org_id = models.CharField(max_length=64)
        shelf = models.ForeignKey(Shelf, on_delete=models.CASCADE, related_name="labels")
        text = models.CharField(max_length=64)

        class Meta:
            app_label = "secapp"
            db_table = "secapp_sidedoor_label"


@pytest.fixture
def shelves(guard: str) -> Iterator[dict[str, Any]]:
    """Two tables made for these tests (the superuser makes them; the application's role may use them,
    and the labels carry the tenant policy): a shelf holding a label of each org, and a shelf of org A's."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        row = cursor.fetchone()
        assert row is not None
        role = connection.ops.quote_name(row[0])
        cursor.execute("RESET ROLE")
    with connection.schema_editor() as editor:
        editor.create_model(Shelf)
        editor.create_model(Label)
    label_table = connection.ops.quote_name(Label._meta.db_table)
    predicate = SQL_POLICY_PREDICATE.format(column=connection.ops.quote_name("org_id"))
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {label_table} ENABLE ROW LEVEL SECURITY")
        cursor.execute(SQL_CREATE_POLICY.format(policy=POLICY_NAME, table=label_table, predicate=predicate))
        for table in (Shelf._meta.db_table, Label._meta.db_table):
            cursor.execute(f"GRANT ALL ON {connection.ops.quote_name(table)} TO {role}")
        cursor.execute(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}")
        cursor.execute(f"SET ROLE {role}")
    shared = Shelf.objects.create(name="shared")
    own = Shelf.objects.create(name="org A's")
    made = {
        "shared": shared,
        "own": own,
        A: Label.objects.create(org_id=A, shelf=shared, text="label of org-A"),
        B: Label.objects.create(org_id=B, shelf=shared, text="label of org-B"),
        "own label": Label.objects.create(org_id=A, shelf=own, text="another of org-A"),
    }
    try:
        yield made
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET ROLE")
        with connection.schema_editor() as editor:
            editor.delete_model(Label)
            editor.delete_model(Shelf)
        with connection.cursor() as cursor:
            cursor.execute(f"SET ROLE {role}")


def labels_stored() -> list[str]:
    """Every label's text, read outside any scope."""
    return sorted(Label.objects.values_list("text", flat=True))


EVERY_LABEL = ["another of org-A", "label of org-A", "label of org-B"]


def test_a_cascade_into_another_orgs_rows_is_refused(shelves: dict[str, Any]) -> None:
    shared = shelves["shared"]
    refused(lambda: Shelf.objects.get(pk=shared.pk).delete())
    refused(lambda: Shelf.objects.filter(pk=shared.pk).delete())
    assert labels_stored() == EVERY_LABEL
    assert Shelf.objects.filter(pk=shared.pk).exists()


def test_a_cascade_in_a_run_with_no_org_is_refused(shelves: dict[str, Any]) -> None:
    with acting_as(Actor(org_id=None)), pytest.raises(UltimateError) as caught:
        Shelf.objects.get(pk=shelves["own"].pk).delete()
    assert caught.value.code == "X_TENANCY_ACTOR_ORG_REQUIRED"
    assert "cross_tenant(reason, fn)" in caught.value.message
    assert labels_stored() == EVERY_LABEL


def test_a_cascade_into_the_run_orgs_own_rows_and_across_tenants_deletes(shelves: dict[str, Any]) -> None:
    with acting_as(Actor(org_id=A)):
        Shelf.objects.get(pk=shelves["own"].pk).delete()
    assert labels_stored() == ["label of org-A", "label of org-B"]
    with acting_as(Actor(org_id=A)):
        cross_tenant("a support fix across orgs", lambda: Shelf.objects.get(pk=shelves["shared"].pk).delete())
    assert labels_stored() == [] and not Shelf.objects.exists()


def test_a_cascade_the_collector_loads_keeps_to_the_run_org(rows: dict[str, Any], guard: str) -> None:
    """The collector's other path: a bucket's items, which notes point at, are loaded before they are
    deleted — with ``only()`` of the keys the notes use, which now loads the org too, so the run's own
    cascade is not refused as rows "without an org"; another org's item under the bucket still is (or,
    where row-level security hides it, its foreign key fails the delete), and nothing is deleted."""
    bucket_a = rows[A]["bucket"]
    planted = Item.objects.create(org_id=B, bucket=bucket_a, secret="planted by org-B", total=1)
    with acting_as(Actor(org_id=A)):
        try:
            Bucket.objects.get(pk=bucket_a.pk).delete()
        except UltimateError as error:
            assert error.code == "X_TENANCY_ACTOR_MISMATCH" and B not in error.message
        except IntegrityError:
            assert guard == "row-level security"
        else:
            raise AssertionError("deleted a bucket holding another org's item")
    assert stored(planted) == (B, "planted by org-B", 1) and Bucket.objects.filter(pk=bucket_a.pk).exists()
    planted.delete()
    with acting_as(Actor(org_id=A)):
        Bucket.objects.get(pk=bucket_a.pk).delete()
    assert list(Item.objects.values_list("org_id", flat=True)) == [B]


# -- 5. select_for_update() refuses before it locks -------------------------------------------------


def locked_elsewhere(pk: int) -> bool:
    """Is the item row locked by another session (asked from a fresh one, without waiting)?"""
    with psycopg.connect(conninfo_for(connection.settings_dict), autocommit=True) as other:
        try:
            other.execute("SELECT 1 FROM secapp_item WHERE id = %s FOR UPDATE NOWAIT", [pk])
        except psycopg.errors.LockNotAvailable:
            return True
    return False


@pytest.mark.parametrize("how", ["get", "filter", "values", "iterator", "a reverse relation", "update_or_create"])
def test_select_for_update_of_another_orgs_row_locks_nothing(rows: dict[str, Any], guard: str, how: str) -> None:
    theirs = rows[B]["item"]
    attacks: dict[str, Callable[[], Any]] = {
        "get": lambda: Item.objects.select_for_update().get(pk=theirs.pk),
        "filter": lambda: list(Item.objects.select_for_update().filter(org_id=B)),
        "values": lambda: list(Item.objects.select_for_update().filter(pk=theirs.pk).values("secret")),
        "iterator": lambda: list(Item.objects.select_for_update().filter(pk=theirs.pk).iterator()),
        "a reverse relation": lambda: list(Bucket(pk=rows[B]["bucket"].pk, org_id=A).items.select_for_update()),
        "update_or_create": lambda: Item.objects.update_or_create(pk=theirs.pk, defaults={"total": 0}),
    }
    with acting_as(Actor(org_id=A)), transaction.atomic():
        try:
            answer = attacks[how]()
        except UltimateError as error:
            answer = error
        except ObjectDoesNotExist:
            answer = Hidden()
        locked = locked_elsewhere(theirs.pk)
    assert not locked, "org B's row stayed locked in org A's transaction"
    if guard == "python guard" or isinstance(answer, UltimateError):
        assert isinstance(answer, UltimateError) and answer.code == "X_TENANCY_ACTOR_MISMATCH", answer
    else:
        assert answer in (Hidden(), []), answer
    assert stored(theirs) == (B, "secret of org-B", 10)


def test_select_for_update_of_the_run_orgs_own_row_locks_it(rows: dict[str, Any]) -> None:
    mine = rows[A]["item"]
    with acting_as(Actor(org_id=A)), transaction.atomic():
        assert Item.objects.select_for_update().get(pk=mine.pk).secret == "secret of org-A"
        assert locked_elsewhere(mine.pk)
    assert not locked_elsewhere(mine.pk)


# -- 6. union() ----------------------------------------------------------------------------------


def test_a_union_of_the_run_orgs_own_rows_reads_through_every_path(rows: dict[str, Any]) -> None:
    mine = Item.objects.filter(org_id=A)
    with acting_as(Actor(org_id=A)):
        assert list(mine.union(mine.filter(total=10)).values_list("secret", flat=True)) == ["secret of org-A"]
        assert list(mine.values_list("secret", flat=True).union(mine.values_list("secret", flat=True))) == [
            "secret of org-A"
        ]
        assert list(mine.values("total").union(mine.values("total"), all=True)) == [{"total": 10}] * 2
        assert mine.union(mine).count() == 1
        assert list(mine.intersection(mine).values_list("total", flat=True)) == [10]
        three = mine.union(mine.filter(total=10)).union(mine.filter(secret="secret of org-A"))
        assert list(three.values_list("secret", flat=True)) == ["secret of org-A"]
        assert [item.secret for item in mine.union(mine)] == ["secret of org-A"]


@pytest.mark.parametrize(
    "why",
    ["union() then values_list()", "values_list() then union()", "count()", "a union of a union", "difference()"],
)
def test_a_union_reaching_another_orgs_rows_is_denied(rows: dict[str, Any], guard: str, why: str) -> None:
    mine, theirs = Item.objects.filter(org_id=A), Item._base_manager.filter(org_id=B)
    attacks: dict[str, Callable[[], Any]] = {
        "union() then values_list()": lambda: sorted(mine.union(theirs).values_list("secret", flat=True)),
        "values_list() then union()": lambda: sorted(
            mine.values_list("secret", flat=True).union(theirs.values_list("secret", flat=True))
        ),
        "count()": lambda: mine.union(theirs).count(),
        "a union of a union": lambda: sorted(mine.union(mine).union(theirs).values_list("total", "secret")),
        "difference()": lambda: sorted(
            Item.objects.values_list("secret", flat=True).difference(mine.values_list("secret", flat=True))
        ),
    }
    denied(attacks[why], guard, rows)
