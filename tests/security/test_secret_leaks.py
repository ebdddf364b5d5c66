"""A secret of a job's input, searched for on every operator surface of a process that does not declare
the job (a web process that never imports the job module, or a job renamed while its dead letters
remain): the CLI (human and JSON), the admin's job and dead-letter pages, the JSON views. The dead
letter's error quoted the secret when it failed; the worker scrubbed it then, and nothing shows it now.

What this suite does not cover yet: the input column of ``x_jobs`` holds the secret in clear (the
worker needs it), and a step output that returns a secret is stored as the step returned it.
"""

from __future__ import annotations

import io
import json
import urllib.parse
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from tests.admin_scenario import CARD_TOKEN, Scenario, build_scenario, postgres_env
from tests.conftest import Env
from ultimate_jobs import registry
from ultimate_jobs.drivers.postgres.driver import PostgresDriver

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

RENDERINGS = {
    CARD_TOKEN,
    repr(CARD_TOKEN)[1:-1],
    json.dumps(CARD_TOKEN)[1:-1],
    urllib.parse.quote(CARD_TOKEN, safe=""),
    "4242-secret",  # a fragment is a leak too
}


@pytest.fixture
def shop(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Env[PostgresDriver], Scenario]]:
    with postgres_env(monkeypatch) as env:
        scenario = build_scenario(env)
        registry.unregister("charge_order")  # this process no longer declares the job
        yield env, scenario


def cli(*args: str) -> str:
    """What ``manage.py jobs …`` prints (it must succeed: a surface that errors shows nothing to search)."""
    out, err = io.StringIO(), io.StringIO()
    call_command("jobs", *args, stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


def test_no_surface_shows_the_secret_of_an_undeclared_job(shop: tuple[Env[PostgresDriver], Scenario]) -> None:
    _, scenario = shop
    client = Client()
    client.force_login(User.objects.create_superuser("operator", "op@example.com", "pw"))
    surfaces = {
        "jobs show": cli("show", scenario.dead_id),
        "jobs show --json": cli("show", scenario.dead_id, "--json"),
        "jobs list --json": cli("list", "--json"),
        "jobs list --state dead": cli("list", "--state", "dead"),
        "admin job page": client.get(
            reverse("admin:ultimate_jobs_job_change", args=[scenario.dead_id])
        ).content.decode(),
        "admin job list": client.get(reverse("admin:ultimate_jobs_job_changelist")).content.decode(),
        "admin dead letters": client.get(reverse("admin:ultimate_jobs_deadletter_changelist")).content.decode(),
        "json job": client.get(f"/jobs/job/{scenario.dead_id}").content.decode(),
        "json dead letters": client.get("/jobs/dead-letters").content.decode(),
    }
    assert all(text for text in surfaces.values()), [name for name, text in surfaces.items() if not text]
    assert "charge_order" in surfaces["jobs list --json"]  # the job is there, only its secret is not
    leaks = [(name, form) for name, text in surfaces.items() for form in RENDERINGS if form in text]
    assert leaks == []
