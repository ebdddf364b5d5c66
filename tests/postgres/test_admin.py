"""The admin on the Postgres driver (issue 7, "Django admin"): who may see it, who may act, every action
through the operator with its per-row refusals reported by code, and every action in the admin log."""

from __future__ import annotations

import html
import itertools
import re
from collections.abc import Iterator
from html.parser import HTMLParser

import pytest
from django.contrib.admin import site
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.test import Client
from django.urls import reverse

from tests.admin_scenario import CARD_TOKEN, Scenario, build_scenario, postgres_env
from tests.conftest import Env
from tests.djtasks import tasks as djtasks
from ultimate_jobs import operator
from ultimate_jobs.core import registry
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.models import DeadLetter, Job, Queue, ScheduledTask
from ultimate_jobs.testing import run_jobs

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

PAGES = {
    "jobs": "admin:ultimate_jobs_job_changelist",
    "dead letters": "admin:ultimate_jobs_deadletter_changelist",
    "queues": "admin:ultimate_jobs_queue_changelist",
    "workers": "admin:ultimate_jobs_worker_changelist",
    "tasks": "admin:ultimate_jobs_scheduledtask_changelist",
}
MODELS = ("job", "deadletter", "queue", "worker", "scheduledtask")
_names = itertools.count()


@pytest.fixture
def pg(monkeypatch: pytest.MonkeyPatch) -> Iterator[Env[PostgresDriver]]:
    with postgres_env(monkeypatch) as env:
        yield env


@pytest.fixture
def shop(pg: Env[PostgresDriver]) -> Scenario:
    return build_scenario(pg)


def login(*, staff: bool = True, perms: tuple[str, ...] = (), enforce_csrf: bool = False) -> Client:
    """A client logged in as a fresh user holding ``perms`` (``"view"``/``"change"`` of every page's
    model, or exact ``"<action>_<model>"`` codenames)."""
    user = User.objects.create_user(f"user{next(_names)}", password="pw", is_staff=staff)
    codenames = [f"{p}_{m}" for p in perms if p in ("view", "change") for m in MODELS]
    codenames += [p for p in perms if "_" in p]
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="ultimate_jobs", codename__in=codenames)
    )
    client = Client(enforce_csrf_checks=enforce_csrf)
    client.force_login(user)
    return client


def action(client: Client, page: str, name: str, ids: list[str], **extra: str) -> str:
    """POST an admin action on ``ids`` from a change list; answers the page it lands on, followed."""
    response = client.post(reverse(PAGES[page]), {"action": name, "_selected_action": ids, **extra}, follow=True)
    assert response.status_code == 200
    return response.content.decode()


def messages_of(page: str) -> list[str]:
    """The texts of the admin's messages on ``page``, tags stripped."""
    found = re.findall(r'<li class="(?:success|error|warning)">(.*?)</li>', page, re.S)
    return [html.unescape(re.sub(r"<[^>]+>", "", m)).strip() for m in found]


def logged(model: type[Job] | type[Queue] | type[ScheduledTask], key: str) -> list[LogEntry]:
    content_type = ContentType.objects.get_for_model(model, for_concrete_model=False)
    return list(LogEntry.objects.filter(content_type=content_type, object_id=key).order_by("id"))


# -- who may see it -----------------------------------------------------------------------------


def test_anonymous_and_non_staff_users_are_sent_to_the_login(shop: Scenario) -> None:
    for client in (Client(), login(staff=False, perms=("view", "change"))):
        for url in [
            *(reverse(p) for p in PAGES.values()),
            reverse("admin:ultimate_jobs_job_change", args=[shop.dead_id]),
        ]:
            response = client.get(url)
            assert response.status_code == 302 and "/admin/login/" in response["Location"], url
        response = client.post(reverse("admin:ultimate_jobs_queue_pause"), {"name": "payments"})
        assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert not operator.inspect_queues()[0].paused  # nothing moved


def test_staff_without_the_model_permissions_is_refused(shop: Scenario) -> None:
    client = login(perms=())
    for url in [
        *(reverse(p) for p in PAGES.values()),
        reverse("admin:ultimate_jobs_deadletter_change", args=[shop.dead_id]),
    ]:
        assert client.get(url).status_code == 403, url
    index = client.get(reverse("admin:index")).content.decode()
    assert "Dead letters" not in index and "Queues" not in index
    retried = client.post(reverse(PAGES["dead letters"]), {"action": "retry", "_selected_action": [shop.dead_id]})
    assert retried.status_code == 403
    act = reverse("admin:ultimate_jobs_deadletter_act", args=[shop.dead_id])
    assert client.post(act, {"action": "retry"}).status_code == 403
    assert client.post(reverse("admin:ultimate_jobs_queue_pause"), {"name": "payments"}).status_code == 403
    assert operator.inspect_job(shop.dead_id).job.state == "dead"
    assert not LogEntry.objects.exists()


def test_a_viewer_sees_every_page_but_no_action(shop: Scenario) -> None:
    client = login(perms=("view",))
    for page, name in PAGES.items():
        response = client.get(reverse(name))
        assert response.status_code == 200, page
        html = response.content.decode()
        assert 'name="action"' not in html, page  # no action menu, no pause button
    job_page = client.get(reverse("admin:ultimate_jobs_deadletter_change", args=[shop.dead_id])).content.decode()
    assert "Retry from the start" not in job_page and "Retry from here" not in job_page
    refused = client.post(reverse(PAGES["dead letters"]), {"action": "retry", "_selected_action": [shop.dead_id]})
    assert refused.status_code == 200  # the action is not offered: the list again, nothing moved
    act = reverse("admin:ultimate_jobs_deadletter_act", args=[shop.dead_id])
    assert client.post(act, {"action": "retry"}).status_code == 403
    assert (
        client.post(reverse("admin:ultimate_jobs_scheduledtask_pause"), {"name": "nightly_report"}).status_code == 403
    )
    assert operator.inspect_job(shop.dead_id).job.state == "dead"


# -- acting --------------------------------------------------------------------------------------


def test_a_permitted_user_retries_a_dead_letter_and_the_job_runs(pg: Env[PostgresDriver], shop: Scenario) -> None:
    client = login(perms=("view", "change"))
    listing = client.get(reverse(PAGES["dead letters"])).content.decode()
    assert shop.dead_id in listing and "GatewayDown" in listing
    assert CARD_TOKEN not in listing and "card **********" in listing  # the error names the secret: scrubbed
    assert shop.done_id not in listing  # only the dead

    shop.gateway["up"] = True
    html = action(client, "dead letters", "retry", [shop.dead_id])

    assert messages_of(html) == [f"Retried 1 job: {shop.dead_id}"]
    assert operator.inspect_job(shop.dead_id).job.state == "ready"
    report = run_jobs(pg.driver, clock=pg.clock, queues=["payments"])
    assert report.outcomes["completed"] == 1
    detail = operator.inspect_job(shop.dead_id)
    assert detail.job.state == "done" and [s.name for s in detail.steps] == ["reserve_stock", "authorize", "capture"]
    (entry,) = logged(DeadLetter, shop.dead_id)
    assert entry.action_flag == CHANGE and entry.user.is_staff
    assert entry.change_message == "Retried through ultimate_jobs.operator; now ready"


def test_retry_from_a_step_asks_for_the_step_then_replays_the_earlier_ones(
    pg: Env[PostgresDriver], shop: Scenario
) -> None:
    client = login(perms=("view", "change"))
    form = client.post(
        reverse(PAGES["dead letters"]), {"action": "retry_from_step", "_selected_action": [shop.dead_id]}
    ).content.decode()
    assert '<select name="step"' in form
    assert re.findall(r'<option value="([^"]+)"', form) == ["reserve_stock", "authorize"]  # capture never completed
    assert operator.inspect_job(shop.dead_id).job.state == "dead"  # the form moved nothing

    shop.gateway["up"] = True
    before = dict(shop.calls)
    html = action(client, "dead letters", "retry_from_step", [shop.dead_id], step="authorize", post="yes")

    assert messages_of(html) == [f"Retried from step “authorize” 1 job: {shop.dead_id}"]
    assert [s.name for s in operator.inspect_job(shop.dead_id).steps] == ["reserve_stock"]
    run_jobs(pg.driver, clock=pg.clock, queues=["payments"])
    assert operator.inspect_job(shop.dead_id).job.state == "done"
    assert shop.calls["reserve_stock"] == before["reserve_stock"]  # replayed from its recorded output
    assert shop.calls["authorize"] == before["authorize"] + 1  # ran again
    (entry,) = logged(DeadLetter, shop.dead_id)
    assert entry.change_message == "Retried from step 'authorize' through ultimate_jobs.operator; now ready"


def test_each_refused_row_is_reported_with_its_code_and_the_rest_go_on(shop: Scenario) -> None:
    client = login(perms=("view", "change"))

    html = action(client, "jobs", "retry", [shop.dead_id, shop.ready_id])
    assert messages_of(html)[0] == f"Retried 1 job: {shop.dead_id}"
    assert messages_of(html)[1].startswith(f"{shop.ready_id} refused: X_JOB_NOT_REQUEUEABLE — ")

    html = action(client, "jobs", "cancel", [shop.done_id, shop.ready_id])
    assert messages_of(html)[0] == f"Cancelled 1 job: {shop.ready_id}"
    assert messages_of(html)[1].startswith(f"{shop.done_id} refused: X_JOB_NOT_CANCELLABLE — ")

    html = action(client, "jobs", "promote", [shop.delayed_id, shop.done_id])
    assert messages_of(html)[0] == f"Promoted 1 job: {shop.delayed_id}"
    assert messages_of(html)[1].startswith(f"{shop.done_id} refused: X_JOB_NOT_PROMOTABLE — ")

    states = {
        i: operator.inspect_job(i).job.state for i in (shop.dead_id, shop.ready_id, shop.delayed_id, shop.done_id)
    }
    assert states == {shop.dead_id: "ready", shop.ready_id: "cancelled", shop.delayed_id: "ready", shop.done_id: "done"}
    # only what moved is logged, once each
    assert [e.change_message for e in logged(Job, shop.ready_id)] == [
        "Cancelled through ultimate_jobs.operator; now cancelled"
    ]
    assert LogEntry.objects.count() == 3


def test_remove_asks_first_then_deletes_through_the_operator(shop: Scenario) -> None:
    client = login(perms=("view", "change"))
    confirm = client.post(reverse(PAGES["jobs"]), {"action": "remove", "_selected_action": [shop.done_id]})
    assert confirm.status_code == 200 and "Yes, remove 1 job" in confirm.content.decode()
    assert operator.inspect_job(shop.done_id).job.state == "done"

    html = action(client, "jobs", "remove", [shop.done_id], post="yes")

    assert messages_of(html) == [f"Removed 1 job: {shop.done_id}"]
    assert not Job.objects.filter(pk=shop.done_id).exists()
    (entry,) = logged(Job, shop.done_id)
    assert entry.action_flag == DELETION and entry.change_message == "Removed through ultimate_jobs.operator"


def test_the_job_page_buttons_act_through_the_operator(shop: Scenario) -> None:
    client = login(perms=("view", "change"))
    act = reverse("admin:ultimate_jobs_job_act", args=[shop.ready_id])
    assert client.get(act).status_code == 405
    response = client.post(act, {"action": "cancel"}, follow=True)
    assert messages_of(response.content.decode()) == [f"Cancelled 1 job: {shop.ready_id}"]
    assert operator.inspect_job(shop.ready_id).job.state == "cancelled"
    response = client.post(act, {"action": "cancel"}, follow=True)
    assert messages_of(response.content.decode())[0].startswith(f"{shop.ready_id} refused: X_JOB_NOT_CANCELLABLE")
    response = client.post(act, {"action": "remove"})
    assert response.status_code == 302 and response["Location"] == reverse(PAGES["jobs"])
    assert [e.action_flag for e in logged(Job, shop.ready_id)] == [CHANGE, DELETION]


def test_an_action_without_the_csrf_token_is_refused(shop: Scenario) -> None:
    client = login(perms=("view", "change"), enforce_csrf=True)
    assert client.post(reverse("admin:ultimate_jobs_queue_pause"), {"name": "payments"}).status_code == 403
    act = reverse("admin:ultimate_jobs_deadletter_act", args=[shop.dead_id])
    assert client.post(act, {"action": "retry"}).status_code == 403
    assert operator.inspect_job(shop.dead_id).job.state == "dead"


def test_queues_and_tasks_pause_and_resume_and_are_logged(shop: Scenario) -> None:
    client = login(perms=("view", "change"))
    page = client.get(reverse(PAGES["queues"])).content.decode()
    assert 'data-queue="exports"' in page and "Resume" in page  # exports is paused
    assert client.get(reverse("admin:ultimate_jobs_queue_pause")).status_code == 405

    client.post(reverse("admin:ultimate_jobs_queue_pause"), {"name": "payments"}, follow=True)
    client.post(reverse("admin:ultimate_jobs_queue_resume"), {"name": "exports"}, follow=True)
    paused = {q.queue: q.paused for q in operator.inspect_queues()}
    assert paused["payments"] and not paused["exports"]
    assert [e.change_message for e in logged(Queue, "payments")] == ["Paused through ultimate_jobs.operator"]
    assert [e.change_message for e in logged(Queue, "exports")] == ["Resumed through ultimate_jobs.operator"]

    response = client.post(reverse("admin:ultimate_jobs_scheduledtask_pause"), {"name": "nightly_report"}, follow=True)
    assert messages_of(response.content.decode()) == ["Paused 1 task: nightly_report"]
    assert [t.paused for t in operator.inspect_tasks() if t.name == "nightly_report"] == [True]
    assert [e.change_message for e in logged(ScheduledTask, "nightly_report")] == [
        "Paused through ultimate_jobs.operator"
    ]

    response = client.post(reverse("admin:ultimate_jobs_queue_pause"), {"name": "paymnets"}, follow=True)
    assert "Nothing in this process declares the queue 'paymnets' — a typo?" in messages_of(response.content.decode())


# -- what the pages show -------------------------------------------------------------------------


def test_the_job_page_shows_the_timeline_the_stack_progress_and_attempts(shop: Scenario) -> None:
    client = login(perms=("view", "change"))
    html = client.get(reverse("admin:ultimate_jobs_deadletter_change", args=[shop.dead_id])).content.decode()

    steps = re.findall(r'<span class="uj-mono uj-strong">([^<]+)</span>', html)
    assert steps == ["reserve_stock", "authorize"]
    assert "attempt 3 stopped here" in html  # the capture that failed, after the last persisted step
    stack = re.search(r'<pre class="uj-pre">(.*?)</pre>', html, re.S)
    assert stack is not None and "Traceback" in stack.group(1) and "GatewayDown" in stack.group(1)
    assert "gateway 503 while capturing AUTH-7731" in html
    assert re.search(r'<div class="uj-value">3 <span class="uj-quiet">/ 3</span></div>', html)  # attempts
    assert "capturing the payment" in html and "66.7%" in html  # progress
    assert CARD_TOKEN not in html and "**********" in html  # the secret input field is masked
    assert "Retry from the start" in html and html.count("Retry from here") == 2


def test_search_by_id_prefix_or_idempotency_key_and_filters(shop: Scenario) -> None:
    client = login(perms=("view",))
    url = reverse(PAGES["jobs"])

    def ids(**params: str) -> set[str]:
        html = client.get(url, params).content.decode()
        return set(re.findall(r'<code class="uj-id">([0-9a-f-]{36})</code>', html))

    assert ids(q=shop.dead_id[:6]) >= {shop.dead_id}
    assert ids(q=shop.dead_id.replace("-", "")[:14]) == {shop.dead_id}  # dashes optional
    assert ids(q="order:1042") == {shop.dead_id}
    assert ids(q="no-such-key") == set()
    assert ids(state__exact="dead") == {shop.dead_id}
    assert ids(queue="inventory", name="sync_stock_levels") >= {shop.ready_id, shop.delayed_id}
    assert ids(tenant_id="acme") == {shop.dead_id}
    assert ids(queue="emails", state__exact="done") >= {shop.done_id}


def test_the_job_filter_offers_the_django_tasks_whose_rows_the_list_shows(pg: Env[PostgresDriver]) -> None:
    """A ``django.tasks`` task has no ``@job`` in the web process (a worker builds its handle when it
    first runs a row), yet the list shows its rows: the "job" filter offers its name beside the
    declared jobs, and choosing it lists those rows."""
    task_id = djtasks.add.enqueue(2, 3).id
    registry.unregister(djtasks.add.module_path)  # the admin runs in a web process that never met the task
    assert registry.lookup(djtasks.add.module_path) is None
    client = login(perms=("view",))
    response = client.get(reverse(PAGES["jobs"]))
    assert task_id in response.content.decode()
    (by_job,) = [f for f in response.context["cl"].filter_specs if f.title == "job"]
    labels = [c["display"] for c in by_job.links]
    assert "tests.djtasks.tasks.add" in labels
    assert "x.purge" in labels  # the declared jobs stay
    chosen = client.get(reverse(PAGES["jobs"]), {"name": "tests.djtasks.tasks.add"})
    assert [r["row"].id for r in chosen.context["rows"]] == [task_id]


def test_the_overview_pages_render_the_operator_reads(shop: Scenario) -> None:
    client = login(perms=("view",))
    queues = client.get(reverse(PAGES["queues"])).content.decode()
    row = re.search(r'data-queue="inventory">(.*?)</tr>', queues, re.S)
    assert row is not None
    assert "uj-badge-late" in row.group(1) and "7 min" in row.group(1)
    workers = client.get(reverse(PAGES["workers"])).content.decode()
    assert "web-1:4711:3f9a" in workers and "1 / 8" in workers and shop.done_id in workers
    tasks = client.get(reverse(PAGES["tasks"])).content.decode()
    assert "0 3 * * *" in tasks and "Europe/Paris" in tasks


# -- the frame is Django's own -------------------------------------------------------------------


class Frame(HTMLParser):
    """Where a page's breadcrumbs, filter panel, search bar and search help sit: each element's tag, and
    the ids and classes of the elements around it."""

    VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"})

    def __init__(self, text: str) -> None:
        super().__init__()
        self.open: list[tuple[str, set[str]]] = []  # tag, {#id, .class…}, outermost first
        self.seen: dict[str, tuple[str, frozenset[str]]] = {}  # first #id/.class -> its tag, what is around it
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        given = dict(attrs)
        names = {f"#{given['id']}"} if given.get("id") else set()
        names |= {f".{c}" for c in (given.get("class") or "").split()}
        around = frozenset(n for _, outer in self.open for n in outer)
        for name in names:
            self.seen.setdefault(name, (tag, around))
        if tag not in self.VOID:
            self.open.append((tag, names))

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self.open) - 1, -1, -1):
            if self.open[depth][0] == tag:
                del self.open[depth:]
                return

    def place(self, name: str, *, within: tuple[str, ...]) -> tuple[str, frozenset[str]] | None:
        """The tag of the first element named ``name`` and which of ``within`` are around it."""
        if name not in self.seen:
            return None
        tag, around = self.seen[name]
        return tag, around & frozenset(within)


FRAME = ("#changelist", ".changelist-form-container", "#toolbar", "#changelist-search", "#content-main")


def test_every_page_wears_the_running_djangos_own_frame(shop: Scenario, monkeypatch: pytest.MonkeyPatch) -> None:
    """Django 5.2 draws a list's breadcrumbs as a <div>, its filter panel as a <nav> after the list's
    container; Django 6.1 an <ol> and a <search> inside it. Every ultimate_jobs page draws what Django's own
    user list (or change form) draws, whichever version runs it."""
    monkeypatch.setattr(site.get_model_admin(User), "search_help_text", "A user name.")  # as the lists have
    admin = User.objects.create_superuser("root", "root@example.test", "pw")
    client = Client()
    client.force_login(admin)
    django_list = Frame(client.get(reverse("admin:auth_user_changelist"), {"q": "root"}).content.decode())
    django_form = Frame(client.get(reverse("admin:auth_user_change", args=[admin.pk])).content.decode())
    crumbs = django_list.place(".breadcrumbs", within=FRAME)
    assert crumbs is not None and crumbs == django_form.place(".breadcrumbs", within=FRAME)

    lists = {reverse(PAGES["jobs"]): {"q": "order:1042"}, reverse(PAGES["dead letters"]): {"q": "order:1042"}}
    for url, params in lists.items():
        ours = Frame(client.get(url, params).content.decode())
        for name in (".breadcrumbs", "#changelist-filter", "#changelist-search", "#searchbar_helptext", "#toolbar"):
            assert ours.place(name, within=FRAME) == django_list.place(name, within=FRAME), (url, name)
        assert ours.place("#result_list", within=FRAME) is not None, url
    others = [
        *(reverse(PAGES[p]) for p in ("queues", "workers", "tasks")),
        reverse("admin:ultimate_jobs_outboxrow_changelist"),
        reverse("admin:ultimate_jobs_backfill_changelist"),
        reverse("admin:ultimate_jobs_deadletter_change", args=[shop.dead_id]),
    ]
    pages = {url: client.get(url).content.decode() for url in others}
    dead = reverse(PAGES["dead letters"])
    for name in ("retry_from_step", "remove"):  # the action's form and confirmation
        asked = client.post(dead, {"action": name, "_selected_action": [shop.dead_id]})
        pages[f"{dead} {name}"] = asked.content.decode()
    for url, text in pages.items():
        assert "uj-tabs" in text, url
        assert Frame(text).place(".breadcrumbs", within=FRAME) == crumbs, url
