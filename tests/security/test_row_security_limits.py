"""Where row-level security stops, said exactly, and a deploy that runs without it told so.

The policy trusts two session settings, and SQL that runs in the session can change them: an injected
``set_config`` or ``RESET`` inside a run of org A reopens every row. The README says so (and no longer
"whatever the SQL"), with what a team does about it. ``manage.py check --deploy`` is an error when the app's
role skips the policies (a superuser or ``BYPASSRLS``) or a tenant-scoped table has none, and quiet for the
application's role with every policy in place.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection

from tests.security.attacks import A, two_orgs
from tests.security.cross_org import ROLES, database_role
from ultimate_jobs.core.scope import Actor, acting_as

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

role = pytest.fixture(params=ROLES)(database_role)

README = Path(__file__).resolve().parents[2] / "README.md"
UNENFORCED = "ultimate_jobs.X_TENANCY_ROW_SECURITY_UNENFORCED"
EVERY_SECRET = ["secret of org-A", "secret of org-B"]


def secrets_seen() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM secapp_item ORDER BY secret")
        return [secret for (secret,) in cursor.fetchall()]


def tenancy_section() -> str:
    text = README.read_text()
    start = text.index("## Tenancy")
    return text[start : text.index("\n## ", start + 1)]


# -- 8. what row-level security does not stop --------------------------------------------------------


def injected_read(injected: str) -> list[str]:
    """What SQL injection inside a run can send: ``injected``, then a read, as two statements in one."""
    with connection.cursor() as cursor:
        cursor.execute(f"{injected}; SELECT secret FROM secapp_item ORDER BY secret")
        cursor.nextset()  # the second statement's rows
        return [secret for (secret,) in cursor.fetchall()]


def test_sql_that_sets_the_scope_to_all_reopens_every_row_as_the_readme_says(role: str) -> None:
    two_orgs()
    injected = "SELECT set_config('ultimate_jobs.tenant_scope', 'all', false)"
    with acting_as(Actor(org_id=A)):
        before = secrets_seen()
        after = injected_read(injected)
    assert before == (["secret of org-A"] if role == "app role" else EVERY_SECRET)
    assert after == EVERY_SECRET  # the policy is lifted
    section = " ".join(tenancy_section().split())
    assert "whatever the SQL" not in section
    for said in (injected.removeprefix("SELECT "), "SQL injection"):
        assert said in section, f"the README does not say {said!r}"


@pytest.mark.parametrize(
    "injected", ["SELECT set_config('ultimate_jobs.tenant_scope', '', false)", "RESET ultimate_jobs.tenant_scope"]
)
def test_sql_that_clears_the_scope_closes_every_row_as_the_readme_says(role: str, injected: str) -> None:
    two_orgs()
    with acting_as(Actor(org_id=A)):
        after = injected_read(injected)
    # The policy fails closed: a session whose scope nobody set sees no scoped row (a superuser skips it).
    assert after == ([] if role == "app role" else EVERY_SECRET)
    section = " ".join(tenancy_section().split())
    assert "RESET" in section and "fails closed" in section


def test_the_readme_says_what_a_team_does_about_it() -> None:
    section = " ".join(tenancy_section().split())
    for said in ("parameters", "SET ROLE", "RESET ROLE", "a login role per org"):
        assert said in section, f"the README does not say {said!r}"


# -- 9. a deploy notices a role that bypasses the policies, or a table without one ------------------


def deploy_check() -> str:
    """``manage.py check --deploy``: its report, raised or not."""
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("check", "--deploy", stdout=out, stderr=err)
    except SystemCheckError as failed:
        return f"FAILED\n{failed}\n{out.getvalue()}{err.getvalue()}"
    return out.getvalue() + err.getvalue()


def test_check_deploy_is_an_error_for_a_role_that_bypasses_row_security_and_quiet_for_the_app_role(role: str) -> None:
    report = deploy_check()
    if role == "superuser":
        assert report.startswith("FAILED") and UNENFORCED in report
        assert re.search(r"role '\w+', a superuser or BYPASSRLS role", report), report
        assert "NOSUPERUSER NOBYPASSRLS" in report  # the hint says what to do
    else:
        assert UNENFORCED not in report, report


@pytest.fixture
def unforced_bucket(role: str) -> Iterator[None]:
    """The Bucket table without FORCE ROW LEVEL SECURITY: its owner, the app role, skips the policy."""
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE secapp_bucket NO FORCE ROW LEVEL SECURITY")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE secapp_bucket FORCE ROW LEVEL SECURITY")


def test_check_deploy_names_a_scoped_table_without_forced_row_security(role: str, unforced_bucket: None) -> None:
    report = deploy_check()
    assert report.startswith("FAILED") and UNENFORCED in report
    assert "secapp.Bucket: table 'secapp_bucket' has no forced tenant row-level security policy" in report
    assert "EnableTenantRowSecurity('Bucket')" in report
    assert "secapp_item" not in report  # the tables with their policy are not named


def test_without_deploy_the_same_findings_are_warnings(role: str) -> None:
    out = io.StringIO()
    call_command("check", "--database", "default", stdout=out, stderr=out)  # does not raise: warnings only
    report = out.getvalue()
    assert UNENFORCED not in report
    assert ("X_TENANCY_ROW_SECURITY_BYPASSED" in report) is (role == "superuser"), report


def test_the_readme_shows_the_app_role_setup_in_four_lines() -> None:
    section = tenancy_section()
    block = re.search(r"The app's database role.*?```sh\n(.*?)```", section, re.S)
    assert block is not None, "no shell block after 'The app's database role'"
    lines = [line for line in block.group(1).splitlines() if line.strip() and not line.startswith("--")]
    assert len(lines) == 4, lines
    assert "NOSUPERUSER NOBYPASSRLS" in block.group(1)
    assert "check --deploy" in section
