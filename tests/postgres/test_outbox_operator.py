"""The outbox for an operator: the set-aside rows listed, retried and removed through the operator, the
admin's outbox page and ``manage.py jobs outbox`` — on Postgres, with rows a real database refused."""

from __future__ import annotations

import html
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse

from tests.conftest import installed
from ultimate_jobs import JobRun, job, operator
from ultimate_jobs.core.routing import set_jobs_router
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.outbox import OutboxRouter, outbox_relay, postgres_outbox_store, set_outbox_store
from ultimate_jobs.testing import FrozenClock

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

PAGE = "admin:ultimate_jobs_outboxrow_changelist"


@dataclass
class Staged:
    bad: str  # set aside: its run_at no timestamp holds
    good: str  # published
    waiting: str  # pending, behind the relay's one-row batches


@pytest.fixture
def staged() -> Iterator[Staged]:
    clock = FrozenClock()
    driver = PostgresDriver(clock=clock)
    store = postgres_outbox_store(clock=clock)
    with installed(clock, driver):

        @job(name="bill", idempotency_key=lambda i: i["k"], tenant="none")
        def bill(run: JobRun[Any]) -> None:
            return None

        set_jobs_router(OutboxRouter(store=store, driver=driver))
        set_outbox_store(store)
        try:
            with transaction.atomic():
                bad, good, waiting = (bill.enqueue({"k": k}).id for k in ("a", "b", "c"))
            with connection.cursor() as cursor:  # made unpublishable after staging (a hand edit, an old stager)
                cursor.execute(
                    "UPDATE x_outbox SET request = jsonb_set(request, '{run_at_ms}', '100000000000000000000') "
                    "WHERE id = %s",
                    [bad],
                )
            relay = outbox_relay(store=store, driver=driver, clock=clock, batch_size=2)
            assert relay.run_once() == 1  # "a" set aside, "b" published; "c" waits for the next pass
            yield Staged(bad, good, waiting)
        finally:
            set_jobs_router(None)
            set_outbox_store(None)


def outbox_ids() -> dict[str, str]:
    """Every x_outbox row's id and state."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id::text, CASE WHEN published_at IS NOT NULL THEN 'published' "
            "WHEN failed_at IS NOT NULL THEN 'failed' ELSE 'pending' END FROM x_outbox"
        )
        return dict(cursor.fetchall())


# -- the operator ------------------------------------------------------------------------------------


def test_the_operator_lists_retries_and_removes_set_aside_rows(staged: Staged) -> None:
    view = operator.inspect_outbox()
    assert (view.pending, view.failed) == (1, 1)
    (row,) = view.rows
    assert (row.id, row.name) == (staged.bad, "bill") and "out of range" in (row.error or "")
    assert view.as_dict()["rows"][0]["id"] == staged.bad

    retried = operator.retry_outbox_rows([staged.bad.upper(), staged.good, staged.waiting])
    assert retried.landed == (staged.bad,) and retried.missed == (staged.good, staged.waiting)
    assert outbox_ids()[staged.bad] == "pending"

    with connection.cursor() as cursor:  # set it aside again, then remove it
        cursor.execute("UPDATE x_outbox SET failed_at = now() WHERE id = %s", [staged.bad])
    removed = operator.remove_outbox_rows([staged.bad, staged.waiting])
    assert removed.as_dict() == {"action": "remove", "landed": [staged.bad], "missed": [staged.waiting]}
    assert outbox_ids() == {staged.good: "published", staged.waiting: "pending"}


@pytest.mark.parametrize("ids", [["not-a-uuid"], [f"{'0' * 8}\x00"], ["x" * 10_000], [], "a-string"])
def test_the_operator_refuses_ids_no_row_can_have(staged: Staged, ids: Any) -> None:
    with pytest.raises(UltimateError) as caught:
        operator.remove_outbox_rows(ids)
    assert caught.value.code in ("X_JOB_ID_INVALID", "X_JOB_ARGUMENT_INVALID")
    assert len(outbox_ids()) == 3


# -- the admin page ----------------------------------------------------------------------------------


def login(*perms: str) -> Client:
    user = User.objects.create_user(f"ops-{'-'.join(perms) or 'none'}", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=[f"{p}_outboxrow" for p in perms]))
    client = Client()
    client.force_login(user)
    return client


def texts(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def test_the_admin_page_shows_counts_and_the_set_aside_row(staged: Staged) -> None:
    page = login("view").get(reverse(PAGE)).content.decode()
    assert "1 waiting to publish" in " ".join(texts(page).split())
    assert staged.bad in page and "out of range" in page
    assert "Retry" not in page  # viewing is not operating


def test_an_operator_retries_and_removes_from_the_admin(staged: Staged) -> None:
    client = login("change")
    landed = client.post(reverse("admin:ultimate_jobs_outboxrow_retry"), {"id": staged.bad}, follow=True)
    assert landed.status_code == 200 and "Retried 1 outbox row" in texts(landed.content.decode())
    assert outbox_ids()[staged.bad] == "pending"
    refused = client.post(reverse("admin:ultimate_jobs_outboxrow_remove"), {"id": staged.waiting}, follow=True)
    assert "is not set aside" in texts(refused.content.decode())
    assert outbox_ids()[staged.waiting] == "pending"


@pytest.mark.parametrize("bad", ["not-a-uuid", "\x00", "../../etc", "9" * 10_000])
def test_the_admin_answers_400_for_an_id_no_row_can_have(staged: Staged, bad: str) -> None:
    response = login("change").post(reverse("admin:ultimate_jobs_outboxrow_remove"), {"id": [staged.bad, bad]})
    assert response.status_code == 400 and b"X_JOB_ID_INVALID" in response.content
    assert outbox_ids()[staged.bad] == "failed"  # nothing was removed


def test_acting_needs_the_change_permission(staged: Staged) -> None:
    response = login("view").post(reverse("admin:ultimate_jobs_outboxrow_remove"), {"id": staged.bad})
    assert response.status_code == 403
    assert outbox_ids()[staged.bad] == "failed"


# -- the CLI -----------------------------------------------------------------------------------------


def jobs(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("jobs", *args, stdout=out, stderr=err)
        code = 0
    except CommandError as exit_:  # the exit status, as the command line would see it
        code = exit_.returncode
    return code, out.getvalue() + err.getvalue()


def test_jobs_outbox_lists_retries_and_removes(staged: Staged) -> None:
    code, shown = jobs("outbox")
    assert code == 0 and staged.bad in shown and "1 set aside" in shown
    code, shown = jobs("outbox", "--json")
    data = json.loads(shown)
    assert (data["pending"], data["failed"], data["rows"][0]["id"]) == (1, 1, staged.bad)
    code, shown = jobs("outbox", "retry", staged.bad)
    assert code == 0 and outbox_ids()[staged.bad] == "pending"
    code, shown = jobs("outbox", "remove", staged.waiting, "--json")
    assert code == 1 and json.loads(shown)["missed"] == [staged.waiting]
    code, shown = jobs("outbox", "remove", "not-a-uuid")
    assert code == 1 and "X_JOB_ID_INVALID" in shown
