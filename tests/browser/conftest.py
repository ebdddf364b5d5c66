"""What the browser tests share: Debian's ``chromium`` driven by Playwright's Python package (``make
browser`` installs chromium; Playwright never downloads a browser here), the Postgres driver installed
for the live server, logging in, and screenshots under ``tests/browser/artifacts/`` (git-ignored) for a
person to look at."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import connections
from django.urls import reverse
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.admin_scenario import postgres_env
from tests.conftest import Env
from ultimate_jobs.drivers.postgres.driver import PostgresDriver

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).parent / "artifacts"
PASSWORD = "correct horse battery staple"


@pytest.fixture
def pg(monkeypatch: pytest.MonkeyPatch) -> Iterator[Env[PostgresDriver]]:
    with postgres_env(monkeypatch) as env:
        yield env


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed: run `make browser` (make test does)")
    # Playwright's sync API keeps an event loop running in this thread; the test's own ORM calls
    # (the scenario, run_jobs, the checks) are synchronous and safe, and Django must be told so.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()
            # Under the sync API the test's ORM calls run in a context of their own (the greenlet's
            # contextvars), so Django opened a connection for them: close it, or the test database
            # cannot be dropped at the end of the session.
            connections.close_all()


@pytest.fixture
def page(browser: Browser) -> Page:
    return browser.new_page(viewport={"width": 1440, "height": 900})


def log_in(page: Page, base: str) -> None:
    """Create a superuser and log ``page`` in as them through the admin's login form."""
    User.objects.create_superuser("ops", "ops@example.test", PASSWORD)
    page.goto(f"{base}{reverse('admin:login')}?next={reverse('admin:index')}")
    page.fill("#id_username", "ops")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    expect(page.locator("#user-tools")).to_contain_text("ops")


def shoot(page: Page, name: str) -> Path:
    """A full-page screenshot, ``artifacts/<name>.png``."""
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
