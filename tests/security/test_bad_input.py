"""Input no row can hold answers a coded refusal on every operator surface — a 400 from the JSON views
and the admin, exit 1 from the CLI — never a 500, a ``DataError`` or a traceback:

- filter text with a NUL byte (Postgres text cannot store one) or a megabyte of it: ``X_JOB_PAGE_INVALID``;
- a job id that is no UUID — wherever one reaches the database from outside: the CLI's id arguments, the
  admin's selected rows and object URLs, the JSON job view: ``X_JOB_ID_INVALID``;
- a blank, NUL-bearing or over-long queue, task or step name or cancel reason, an action a page does not
  offer: ``X_JOB_ARGUMENT_INVALID``.

Each refusal is checked to change nothing (rows, steps, pauses, the admin log) and to show no row's data.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from tests.admin_scenario import postgres_env
from tests.conftest import AnyJobsEnv, Env
from ultimate_jobs import JobRun, job, operator
from ultimate_jobs.contracts.operator import MAX_FILTER_CHARS
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.testing import run_jobs

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

BAD = pytest.mark.parametrize("value", ["org\x00B", "x" * (MAX_FILTER_CHARS + 1)], ids=["nul", "too-long"])


@pytest.fixture
def pg(monkeypatch: pytest.MonkeyPatch) -> Iterator[Env[PostgresDriver]]:
    with postgres_env(monkeypatch) as env:
        yield env


@pytest.fixture
def staff() -> Client:
    client = Client()
    # No password: hashing one costs more than the request under test.
    client.force_login(User.objects.create_user("operator", is_staff=True, is_superuser=True))
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
@pytest.mark.parametrize("param", ["q", "queue", "name", "tenant", "tenant_id", "idempotency_key", "created_from"])
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


# -- malformed ids and names -------------------------------------------------------------------

ORG_A, ORG_B = "org-a-5d1f", "org-b-8c2e"
UNKNOWN = "00000000-0000-4000-8000-000000000000"

BAD_ID_TEXT = {
    "text": "not-a-job",
    "nul": "01234567-89ab-4cde-8f01-2345678\x009abc",
    "percent-nul": "%00",
    "10k": "a" * 10_000,
    "dotdot": "../../etc/passwd",
    "quote": "' OR '1'='1",
    "braces": "{01234567-89ab-4cde-8f01-23456789abcd}",
    "urn": "urn:uuid:01234567-89ab-4cde-8f01-23456789abcd",
    "underscore": "0123456789ab4cde8f0123456789abc_",
    "too-short": "01234567-89ab-4cde-8f01-23456789abc",
}
BAD_IDS = pytest.mark.parametrize("bad", list(BAD_ID_TEXT.values()), ids=list(BAD_ID_TEXT))
# An empty id cannot be a URL path segment (the route changes); everywhere else it is one more bad id.
BAD_IDS_OR_EMPTY = pytest.mark.parametrize("bad", [*BAD_ID_TEXT.values(), ""], ids=[*BAD_ID_TEXT, "empty"])
BAD_NAMES = pytest.mark.parametrize(
    "bad", ["", "   ", "payments\x00", "q" * 10_000], ids=["empty", "blank", "nul", "10k"]
)
# What a URL path can carry: a blank segment is another route.
BAD_URL_NAMES = pytest.mark.parametrize("bad", ["payments\x00", "q" * 10_000], ids=["nul", "10k"])


@dataclass
class Shop:
    """Jobs of two orgs in every kind of state, a paused queue and task — and every text of theirs a
    refusal must not show."""

    done: str
    dead: str
    ready: str
    delayed: str

    @property
    def markers(self) -> list[str]:
        keys = [f"charge:{org}:{n}" for org, n in ((ORG_A, 1), (ORG_B, 2), (ORG_A, 3), (ORG_B, 4))]
        return [self.done, self.dead, self.ready, self.delayed, ORG_A, ORG_B, *keys, "bad_input_charge"]


def open_shop(env: AnyJobsEnv | Env[PostgresDriver]) -> Shop:
    @job(
        name="bad_input_charge",
        queue="bad-input",
        tenant=lambda i: i["org"],
        idempotency_key=lambda i: f"charge:{i['org']}:{i['n']}",
        retry={"attempts": 1},
    )
    def charge(run: JobRun[dict[str, Any]]) -> int:
        run.step.run("reserve", lambda: 1)
        if run.input["fail"]:
            raise RuntimeError(f"declined for {run.input['org']}")
        return 1

    done = charge.enqueue({"org": ORG_A, "n": 1, "fail": False}).id
    dead = charge.enqueue({"org": ORG_B, "n": 2, "fail": True}).id
    run_jobs(env.driver, clock=env.clock, queues=["bad-input"])
    ready = charge.enqueue({"org": ORG_A, "n": 3, "fail": False}).id
    delayed = charge.enqueue({"org": ORG_B, "n": 4, "fail": False}, delay="1h").id
    operator.pause_queue("bad-input-held")
    operator.pause_task("bad_input_nightly")
    shop = Shop(done=done, dead=dead, ready=ready, delayed=delayed)
    states = {r.id: r.state for r in operator.list_jobs().rows}
    assert states == {done: "done", dead: "dead", ready: "ready", delayed: "delayed"}
    return shop


def snapshot() -> Any:
    """Everything a refused request could have changed: every row, its steps, the pauses, the admin log."""
    rows = sorted(
        (r.id, r.state, r.attempts, r.run_at_ms, r.updated_at_ms, r.last_error) for r in operator.list_jobs().rows
    )
    steps = {row[0]: [(s.name, s.status) for s in operator.inspect_job(row[0]).steps] for row in rows}
    queues = sorted(q.queue for q in operator.inspect_queues() if q.paused)
    tasks = sorted(t.name for t in operator.inspect_tasks() if t.paused)
    return rows, steps, queues, tasks, LogEntry.objects.count()


def assert_refused(shop: Shop, before: Any, text: str, code: str) -> None:
    """The refusal names its code, shows no traceback and no row's data, and changed nothing."""
    assert code in text
    assert "Traceback" not in text and "DataError" not in text
    leaked = [m for m in shop.markers if m in text]
    assert not leaked, leaked
    assert snapshot() == before


def cli(*argv: str) -> tuple[int, str, str]:
    """``manage.py jobs *argv`` through ``call_command``: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("jobs", *argv, stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def cli_refuses(shop: Shop, code: str, *argv: str) -> None:
    """Both output forms exit 1 with ``code``: ``{"error": …}`` on stdout, ``CODE: …`` on stderr."""
    before = snapshot()
    status, out, err = cli(*argv, "--json")
    assert status == 1, (status, out, err)
    assert json.loads(out)["error"]["code"] == code
    assert_refused(shop, before, out + err, code)
    status, out, err = cli(*argv)
    assert status == 1 and err.startswith(f"{code}: ") and "Fix: " in err, err
    assert_refused(shop, before, out + err, code)


@pytest.fixture
def shop(pg: Env[PostgresDriver]) -> Shop:
    return open_shop(pg)


# -- the CLI -----------------------------------------------------------------------------------

ID_COMMANDS = [("show",), ("retry",), ("cancel",), ("remove",), ("promote",), ("retry", "--from-step", "reserve")]


# show, retry and cancel take the start of an id (as the worker's console prints it): text shaped like
# one that starts no row's id is not found, never a lookup of something else
CLI_PREFIX_COMMANDS = {"show", "retry", "cancel", "remove", "promote"}  # a start or a short id is looked up


def cli_code(command: str, bad: str) -> str:
    """The code the CLI answers ``bad`` with: a well-shaped id prefix is looked up, anything else refused."""
    if command in CLI_PREFIX_COMMANDS and bad == BAD_ID_TEXT["too-short"]:
        return "X_JOB_NOT_FOUND"
    return "X_JOB_ID_INVALID"


@BAD_IDS_OR_EMPTY
def test_every_cli_command_taking_an_id_refuses_a_malformed_one(shop: Shop, bad: str) -> None:
    for command, *rest in ID_COMMANDS:
        cli_refuses(shop, cli_code(command, bad), command, bad, *rest)


@BAD_NAMES
def test_every_cli_command_taking_a_name_refuses_one_no_row_can_hold(shop: Shop, bad: str) -> None:
    for argv in (("pause", bad), ("resume", bad), ("pause-task", bad), ("resume-task", bad)):
        cli_refuses(shop, "X_JOB_ARGUMENT_INVALID", *argv)
    cli_refuses(shop, "X_JOB_ARGUMENT_INVALID", "retry", shop.dead, "--from-step", bad)
    if bad.strip():  # a blank reason is no reason: the default one is recorded
        cli_refuses(shop, "X_JOB_ARGUMENT_INVALID", "cancel", shop.ready, "--reason", bad)


# -- the admin ---------------------------------------------------------------------------------


def object_url(model: str, key: str, view: str) -> str:
    return f"/admin/ultimate_jobs/{model}/{quote(key, safe='')}/{view}/"


def http_refuses(shop: Shop, before: Any, response: Any, code: str, *, context: Any = None) -> None:
    """A 400 whose body names ``code``, shows no row's data, and changed nothing."""
    assert response.status_code == 400, (context, response.status_code)
    assert_refused(shop, before, response.content.decode(), code)


@pytest.fixture
def before(shop: Shop) -> Any:
    """The state every refusal in the test must leave as it found."""
    return snapshot()


@BAD_IDS
def test_a_job_page_url_with_a_malformed_id_is_400(shop: Shop, staff: Client, before: Any, bad: str) -> None:
    for model in ("job", "deadletter"):
        for view in ("change", "history", "delete"):
            response = staff.get(object_url(model, bad, view))
            http_refuses(shop, before, response, "X_JOB_ID_INVALID", context=(model, view))
        response = staff.post(object_url(model, bad, "act"), {"action": "retry"})
        http_refuses(shop, before, response, "X_JOB_ID_INVALID", context=(model, "act"))


@pytest.mark.parametrize("bad", ["payments\x00", "q" * 10_000], ids=["nul", "10k"])  # a blank one is another URL
def test_a_fleet_page_url_with_a_bad_key_is_400(shop: Shop, staff: Client, before: Any, bad: str) -> None:
    for model in ("queue", "worker", "scheduledtask"):
        for view in ("change", "history", "delete"):
            response = staff.get(object_url(model, bad, view))
            http_refuses(shop, before, response, "X_JOB_ARGUMENT_INVALID", context=(model, view))


CHANGELIST_ACTIONS = [
    ("job", "retry"),
    ("job", "cancel"),
    ("job", "promote"),
    ("job", "remove"),
    ("deadletter", "retry"),
    ("deadletter", "retry_from_step"),
    ("deadletter", "remove"),
]


@BAD_IDS_OR_EMPTY
def test_a_changelist_action_on_a_malformed_selection_is_400_and_moves_no_row(
    shop: Shop, staff: Client, before: Any, bad: str
) -> None:
    """A good row selected beside the bad one is not acted on either: the request is refused whole."""
    for model, action in CHANGELIST_ACTIONS:
        good = shop.dead if model == "deadletter" else shop.ready
        data = {"action": action, "_selected_action": [good, bad], "post": "yes", "step": "reserve"}
        response = staff.post(f"/admin/ultimate_jobs/{model}/", data)
        http_refuses(shop, before, response, "X_JOB_ID_INVALID", context=(model, action))


def test_a_changelist_action_the_page_does_not_offer_is_400(shop: Shop, staff: Client, before: Any) -> None:
    for model, action in [
        ("job", "nope"),
        ("job", "delete_selected"),  # removed: the admin is read-only
        ("deadletter", "cancel"),  # a job-list action the dead letters do not offer
        ("job", "retry\x00"),
        ("job", "r" * 10_000),
    ]:
        data = {"action": action, "_selected_action": [shop.dead], "post": "yes"}
        response = staff.post(f"/admin/ultimate_jobs/{model}/", data)
        http_refuses(shop, before, response, "X_JOB_ARGUMENT_INVALID", context=(model, action[:20]))
    for step in ("reserve\x00", "s" * 10_000):
        data = {"action": "retry_from_step", "_selected_action": [shop.dead], "post": "yes", "step": step}
        response = staff.post("/admin/ultimate_jobs/deadletter/", data)
        http_refuses(shop, before, response, "X_JOB_ARGUMENT_INVALID", context=step[:20])


def test_a_job_page_button_with_a_bad_action_or_step_is_400(shop: Shop, staff: Client, before: Any) -> None:
    for data in [
        {"action": "nope"},
        {"action": ""},
        {"action": "retry_from_step"},
        {"action": "retry_from_step", "step": "reserve\x00"},
        {"action": "retry_from_step", "step": "s" * 10_000},
    ]:
        response = staff.post(object_url("deadletter", shop.dead, "act"), data)
        assert response.status_code == 400, data
        # The refusal may name the job it was asked about (the caller's own URL), never another row's data.
        text = response.content.decode().replace(shop.dead, "<this job>")
        assert_refused(shop, before, text, "X_JOB_ARGUMENT_INVALID")


@BAD_NAMES
def test_a_pause_button_with_a_bad_name_is_400(shop: Shop, staff: Client, before: Any, bad: str) -> None:
    for model in ("queue", "scheduledtask"):
        for verb in ("pause", "resume"):
            response = staff.post(f"/admin/ultimate_jobs/{model}/{verb}/", {"name": bad})
            http_refuses(shop, before, response, "X_JOB_ARGUMENT_INVALID", context=(model, verb))


@pytest.mark.parametrize(
    "params",
    [
        {"created_at__year": "99999999999"},
        {"created_at__year": "9999"},
        {"created_at__year": "0"},
        {"created_at__year": "-1"},
        {"created_at__year": "\uff12\uff10\uff12\uff16"},
        {"created_at__year": "2026", "created_at__month": "13"},
        {"created_at__year": "2026", "created_at__month": "1", "created_at__day": "99999999999999999999"},
    ],
    ids=["huge-year", "year-9999", "year-0", "negative", "fullwidth", "month-13", "huge-day"],
)
def test_a_date_drilldown_out_of_range_is_400(shop: Shop, staff: Client, before: Any, params: dict[str, str]) -> None:
    for model in ("job", "deadletter"):
        response = staff.get(f"/admin/ultimate_jobs/{model}/", params)
        http_refuses(shop, before, response, "X_JOB_PAGE_INVALID", context=model)


# -- the JSON views ----------------------------------------------------------------------------


@BAD_IDS
def test_the_json_job_view_answers_400_with_the_code(shop: Shop, staff: Client, before: Any, bad: str) -> None:
    response = staff.get(f"/jobs/job/{quote(bad, safe='')}")
    assert response.json()["error"]["code"] == "X_JOB_ID_INVALID"
    http_refuses(shop, before, response, "X_JOB_ID_INVALID")
    assert len(response.content) < 2_000  # a 10,000-character id is quoted by its start, not echoed


def cursor(created: Any, job_id: Any) -> str:
    raw = json.dumps({"c": created, "i": job_id}).encode()
    return "jc1." + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def test_a_dead_letter_cursor_no_page_produced_is_400(shop: Shop, staff: Client, before: Any) -> None:
    for after in (cursor(10**20, UNKNOWN), cursor(-(10**20), UNKNOWN), cursor(0, "not-a-uuid"), cursor(0, "\x00")):
        response = staff.get("/jobs/dead-letters", {"after": after})
        assert response.json()["error"]["code"] == "X_JOB_PAGE_INVALID"
        http_refuses(shop, before, response, "X_JOB_PAGE_INVALID", context=after)


# -- both drivers ------------------------------------------------------------------------------


def test_both_drivers_refuse_the_same_ids_and_find_a_canonical_one(any_jobs: AnyJobsEnv) -> None:
    """The operator checks the id before any driver sees it, so the memory driver (which keys rows by
    text) and Postgres (which casts to uuid) answer alike: every malformed id is X_JOB_ID_INVALID on every
    command, and an id in capitals or without dashes names the same row on both."""
    shop = open_shop(any_jobs)
    before = snapshot()
    for bad in [*BAD_ID_TEXT.values(), ""]:
        for command, *rest in ID_COMMANDS:
            status, out, err = cli(command, bad, *rest, "--json")
            assert status == 1 and json.loads(out)["error"]["code"] == cli_code(command, bad), command
            assert_refused(shop, before, out + err, cli_code(command, bad))
        for call in (operator.inspect_job, operator.retry_job, operator.cancel_job, operator.remove_job):
            with pytest.raises(UltimateError) as caught:
                call(bad)
            assert caught.value.code == "X_JOB_ID_INVALID"
    assert snapshot() == before
    for spelled in (shop.dead.upper(), shop.dead.replace("-", "")):
        assert operator.inspect_job(spelled).job.id == shop.dead
        status, out, _ = cli("show", spelled, "--json")
        assert status == 0 and json.loads(out)["id"] == shop.dead
    assert cli("show", UNKNOWN, "--json")[0] == 1
