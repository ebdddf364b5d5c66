"""The attack suite's shared moves: run an attack as org A and judge what came back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from django.db.models import Model

from tests.secapp.models import Bucket, Item, Note
from ultimate_jobs.core.scope import Actor, acting_as
from ultimate_jobs.errors import UltimateError

A, B = "org-A", "org-B"


def two_orgs() -> dict[str, Any]:
    """One bucket, item and note per org, stored outside any scope (as a migration or the admin would)."""
    made: dict[str, Any] = {}
    for org in (A, B):
        bucket = Bucket.objects.create(org_id=org, name=f"bucket of {org}")
        item = Item.objects.create(org_id=org, bucket=bucket, secret=f"secret of {org}", total=10)
        made[org] = {"bucket": bucket, "item": item, "note": Note.objects.create(item=item, text=f"note of {org}")}
    return made


class Hidden:
    """What an attack answered when the row it reached for does not exist for the acting org."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Hidden)

    __hash__ = None  # type: ignore[assignment]


def attempt(attack: Callable[[], Any]) -> Any:
    """``attack`` run as org A: its answer, the refusal, or :class:`Hidden`."""
    with acting_as(Actor(org_id=A)):
        try:
            return attack()
        except UltimateError as error:
            return error
        except ObjectDoesNotExist:
            return Hidden()


def names_org_b(value: Any) -> bool:
    """Does an answer carry anything of org B's (a row of B, B's secret, B's name)?"""
    if isinstance(value, Model):
        return getattr(value, "org_id", None) == B or names_org_b(vars(value))
    if isinstance(value, dict):
        return any(names_org_b(k) or names_org_b(v) for k, v in value.items())
    if isinstance(value, list | tuple | set):
        return any(names_org_b(v) for v in value)
    return B in str(value)


def refused(attack: Callable[[], Any]) -> UltimateError:
    """Run ``attack`` as org A; it must be refused with a code that does not name org B."""
    error = attempt(attack)
    assert isinstance(error, UltimateError), f"not refused: {error!r}"
    assert error.code == "X_TENANCY_ACTOR_MISMATCH", error
    assert B not in error.message and B not in repr(error.meta)
    return error


def denied(attack: Callable[[], Any], guard: str, rows: dict[str, Any]) -> None:
    """Run ``attack`` as org A: refused (the Python guard alone must refuse), or — with row-level
    security — an answer with nothing of org B's in it that stays the same when org B's rows change."""
    answer = attempt(attack)
    if isinstance(answer, UltimateError) or guard == "python guard":
        refused(lambda: _raise_or(answer))
        return
    assert not names_org_b(answer), answer
    # change org B's rows every way an answer could depend on them: values, and how many, under every bucket
    before = {item.pk: item.total for item in Item.objects.filter(org_id=B)}
    Item.objects.filter(org_id=B).update(total=77)
    added = [
        Item.objects.create(org_id=B, bucket=bucket, secret="another of B", total=5) for bucket in Bucket.objects.all()
    ]
    assert attempt(attack) == answer, "the answer depends on org B's rows"
    Item.objects.filter(pk__in=[item.pk for item in added]).delete()
    for pk, total in before.items():
        Item.objects.filter(pk=pk).update(total=total)


def _raise_or(answer: Any) -> Any:
    if isinstance(answer, BaseException):
        raise answer
    return answer


def stored(item: Item) -> tuple[str, str, int]:
    """What the database holds for ``item``'s row now (read outside any scope)."""
    row = Item.objects.get(pk=item.pk)
    return row.org_id, row.secret, row.total
