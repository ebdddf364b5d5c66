"""Filter input no row can hold — a NUL byte (Postgres text cannot store one) or a megabyte of text —
answers a coded refusal on every operator surface (a 400 from the JSON views and the admin, exit 1 with
``X_JOB_PAGE_INVALID`` from the CLI), never a 500 or a database traceback."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from tests.admin_scenario import postgres_env
from tests.conftest import Env
from ultimate_jobs import operator
from ultimate_jobs.drivers.base import MAX_FILTER_CHARS
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.errors import UltimateError

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

BAD = pytest.mark.parametrize("value", ["org\x00B", "x" * (MAX_FILTER_CHARS + 1)], ids=["nul", "too-long"])


@pytest.fixture
def pg(monkeypatch: pytest.MonkeyPatch) -> Iterator[Env[PostgresDriver]]:
    with postgres_env(monkeypatch) as env:
        yield env


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("operator", "op@example.com", "pw"))
    return client


@BAD
def test_the_operator_refuses_before_any_statement(pg: Env[PostgresDriver], value: str) -> None:
    for call in (
        lambda: operator.list_jobs(name=value),
        lambda: operator.list_jobs(tenant_id=value),
        lambda: operator.list_jobs(after=value),
        lambda: operator.inspect_dead_letters(queue=value),
    ):
        with pytest.raises(UltimateError) as caught:
            call()
        assert caught.value.code == "X_JOB_PAGE_INVALID"


@BAD
@pytest.mark.parametrize("param", ["queue", "name", "tenant_id", "after"])
def test_the_json_view_answers_400_with_the_code(
    pg: Env[PostgresDriver], staff: Client, param: str, value: str
) -> None:
    response = staff.get("/jobs/dead-letters", {param: value})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "X_JOB_PAGE_INVALID"


@BAD
@pytest.mark.parametrize("param", ["q", "queue", "name", "tenant"])
def test_the_admin_lists_answer_400(pg: Env[PostgresDriver], staff: Client, param: str, value: str) -> None:
    for page in ("admin:ultimate_jobs_job_changelist", "admin:ultimate_jobs_deadletter_changelist"):
        response = staff.get(reverse(page), {param: value})
        assert response.status_code == 400, (page, response.status_code)
        assert b"X_JOB_PAGE_INVALID" in response.content
        assert b"Traceback" not in response.content


@BAD
def test_the_cli_exits_1_with_the_code(pg: Env[PostgresDriver], value: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("jobs", "list", "--name", value, "--json", stdout=out, stderr=err)
    assert caught.value.returncode == 1
    assert json.loads(out.getvalue())["error"]["code"] == "X_JOB_PAGE_INVALID"
