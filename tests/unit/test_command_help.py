"""What the app's commands say about themselves: ``--version`` names this package's version beside
Django's (Django's own commands print Django's alone), and ``jobs_dev --help`` says the relay runs on
PostgreSQL and on SQLite."""

from __future__ import annotations

import django
import pytest
from django.core.management import load_command_class

import ultimate_jobs

COMMANDS = ("jobs", "jobs_backfill", "jobs_worker", "jobs_scheduler", "jobs_relay", "jobs_dev")


@pytest.mark.parametrize("name", COMMANDS)
def test_version_names_this_package_and_django(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    parser = load_command_class("ultimate_jobs", name).create_parser("manage.py", name)
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--version"])
    assert exited.value.code == 0
    printed = capsys.readouterr().out.strip()
    assert printed == f"ultimate_jobs {ultimate_jobs.__version__} (Django {django.get_version()})"


def test_jobs_dev_help_says_the_relay_runs_on_postgresql_and_on_sqlite() -> None:
    parser = load_command_class("ultimate_jobs", "jobs_dev").create_parser("manage.py", "jobs_dev")
    text = " ".join(parser.format_help().split())
    assert "the outbox relay (when the jobs database is PostgreSQL or SQLite)" in text
    assert "Postgres jobs database" not in text
