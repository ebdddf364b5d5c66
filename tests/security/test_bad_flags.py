"""Every flag of every management command parses into a result, a usage error (exit 2, argparse's message)
or a coded error (exit 1, ``CODE: message``) — never a traceback, a ``DataError`` or an ``OverflowError``.

One table of bad command lines runs through ``call_command`` on the Postgres driver; a row per command
runs the real ``manage.py`` to hold the process's exit status to it; a property test throws generated
values at ``jobs list``, ``jobs stats`` and ``jobs show``.
"""

from __future__ import annotations

import io
import json
import os
import re
import socket
import sys
from collections.abc import Iterator
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.admin_scenario import postgres_env
from tests.conftest import Env
from tests.helpers import Child
from ultimate_jobs.drivers.postgres.driver import PostgresDriver

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]
UNKNOWN = "00000000-0000-4000-8000-000000000000"
USAGE, CODED = 2, 1
CODE = re.compile(r"\bX_[A-Z_]+\b")


@pytest.fixture
def pg(monkeypatch: pytest.MonkeyPatch) -> Iterator[Env[PostgresDriver]]:
    with postgres_env(monkeypatch) as env:
        yield env


def run(*argv: str) -> tuple[int, str, str]:
    """``call_command(*argv)``: the exit status it stands for, everything it said (the usage error's
    message, stdout, stderr) and its stdout alone. Any exception but a ``CommandError`` fails the test:
    on the command line it would be a traceback."""
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command(*argv, stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, f"{exc}\n{out.getvalue()}{err.getvalue()}", out.getvalue()
    return 0, out.getvalue() + err.getvalue(), out.getvalue()


TABLE = [
    # jobs list
    (("jobs", "list", "--created-from", "99999999999999999999"), USAGE, "outside 0001-01-01..9999-12-31"),
    (("jobs", "list", "--created-to", "-99999999999999999"), USAGE, "outside 0001-01-01..9999-12-31"),
    (("jobs", "list", "--created-from", "0001-01-01T00:00:00+01:00"), USAGE, "outside 0001-01-01..9999-12-31"),
    (("jobs", "list", "--created-to", "9999-12-31T23:59:59-05:00"), USAGE, "outside 0001-01-01..9999-12-31"),
    (("jobs", "list", "--created-from", "9" * 5_000), USAGE, "is not an instant"),
    (("jobs", "list", "--created-from", "2026-13-01"), USAGE, "is not an instant"),
    (("jobs", "list", "--created-from", "\u0661\u0662\u0663"), USAGE, "is not an instant"),
    (("jobs", "list", "--limit", "abc"), USAGE, "invalid int value"),
    (("jobs", "list", "--limit", "99999999999999999999"), CODED, "X_JOB_PAGE_INVALID"),
    (("jobs", "list", "--limit", "0"), CODED, "X_JOB_PAGE_INVALID"),
    (("jobs", "list", "--state", "sleeping"), USAGE, "invalid choice: 'sleeping'"),
    (("jobs", "list", "--queue", "q\x00"), CODED, "X_JOB_PAGE_INVALID"),
    (("jobs", "list", "--name", "\udcff"), CODED, "X_JOB_PAGE_INVALID"),  # a byte no UTF-8 decodes, as argv has it
    (("jobs", "list", "--tenant", "t" * 501), CODED, "X_JOB_PAGE_INVALID"),
    (("jobs", "list", "--id-prefix", "\x00"), CODED, "X_JOB_PAGE_INVALID"),
    (("jobs", "list", "--after", "jc1.e30"), CODED, "X_JOB_PAGE_INVALID"),
    (("jobs", "list", "--after", "a", "--before", "b"), USAGE, "not allowed with argument"),
    (("jobs", "-v", "9", "list"), USAGE, "invalid choice: 9"),
    # jobs stats
    (("jobs", "stats", "--since", "9999999999999999999d"), USAGE, "is not a window of 0 to 3650d"),
    (("jobs", "stats", "--since", "3651d"), USAGE, "is not a window of 0 to 3650d"),
    (("jobs", "stats", "--since", "1y"), USAGE, "is not a duration"),
    (("jobs", "stats", "--since", "9" * 100 + "ms"), USAGE, "more than 40 digits"),
    # jobs manifest
    (("jobs", "manifest", "--write", "/missing/dir/m.json"), CODED, "X_JOB_ARGUMENT_INVALID"),
    (("jobs", "manifest", "--write", ""), CODED, "X_JOB_ARGUMENT_INVALID"),  # the current directory
    (("jobs", "manifest", "--write", "m\x00.json"), CODED, "X_JOB_ARGUMENT_INVALID"),
    # one job, pauses, bulk
    (("jobs", "show", "not-an-id"), CODED, "X_JOB_ID_INVALID"),
    (("jobs", "show"), USAGE, "the following arguments are required: id"),
    (("jobs", "retry", UNKNOWN, "--from-step", ""), CODED, "X_JOB_ARGUMENT_INVALID"),
    (("jobs", "cancel", UNKNOWN, "--reason", "r\x00"), CODED, "X_JOB_ARGUMENT_INVALID"),
    (("jobs", "pause", ""), CODED, "X_JOB_ARGUMENT_INVALID"),
    (("jobs", "resume-task", "  "), CODED, "X_JOB_ARGUMENT_INVALID"),
    (("jobs", "requeue-many"), USAGE, "the following arguments are required: --state"),
    (("jobs", "requeue-many", "--state", "ready"), CODED, "X_JOB_NOT_REQUEUEABLE"),
    (("jobs", "remove-many", "--state", "dead", "--queue", "q\x00"), CODED, "X_JOB_PAGE_INVALID"),
    (("jobs", "frobnicate"), USAGE, "invalid choice: 'frobnicate'"),
    # jobs_worker
    (("jobs_worker", "--concurrency", "0"), USAGE, "is not a whole number in 1..1000"),
    (("jobs_worker", "--concurrency", "\u00b2"), USAGE, "is not a whole number in 1..1000"),
    (("jobs_worker", "--concurrency", "q\x00=2"), USAGE, "NUL byte"),
    (("jobs_worker", "--concurrency", "4", "--concurrency", "emails=2"), CODED, "X_INVARIANT"),
    (("jobs_worker", "--async-concurrency", "-1"), USAGE, "is not a whole number in 0..10000"),
    (("jobs_worker", "--async-concurrency", "default=10001"), USAGE, "is not a whole number in 0..10000"),
    (("jobs_worker", "--async-concurrency", "many"), USAGE, "is not a whole number in 0..10000"),
    (("jobs_worker", "--async-concurrency", "q\x00=2"), USAGE, "NUL byte"),
    (("jobs_worker", "--async-concurrency", "500", "--async-concurrency", "emails=2"), CODED, "X_INVARIANT"),
    (("jobs_worker", "--queues", ",,,"), USAGE, "names no queue"),
    (("jobs_worker", "--queues", "default,q\x00"), USAGE, "NUL byte"),
    (("jobs_worker", "--drain-deadline", "forever"), USAGE, "is not a duration"),
    (("jobs_worker", "--drain-deadline", "2d"), USAGE, "is longer than 1d"),
    (("jobs_worker", "--metrics-port", "99999"), USAGE, "is not a TCP port"),
    (("jobs_worker", "--processes", "0"), CODED, "X_INVARIANT"),
    (("jobs_worker", "--max-jobs", "\u00b2"), CODED, "X_INVARIANT"),
    (("jobs_worker", "--max-memory", "9" * 30 + "GB"), CODED, "X_INVARIANT"),
    # jobs_scheduler
    (("jobs_scheduler", "--lease-ttl", "forever"), USAGE, "is not a duration"),
    (("jobs_scheduler", "--tick-interval", "0s"), CODED, "X_INVARIANT"),
    (("jobs_scheduler", "--drain-deadline", "9" * 50 + "d"), USAGE, "more than 40 digits"),
    # jobs_relay
    (("jobs_relay", "--batch-size", "0"), USAGE, "is not a whole number in 1..1000"),
    (("jobs_relay", "--batch-size", "99999999999999999999"), USAGE, "is not a whole number in 1..1000"),
    (("jobs_relay", "--interval", "nope"), USAGE, "is not a duration"),
    (("jobs_relay", "--claim-lease", "2d"), USAGE, "is longer than 1d"),
    # jobs_backfill
    (("jobs_backfill",), USAGE, "exactly one of --all, --pending, --list"),
    (("jobs_backfill", "--all", "--force"), USAGE, "--force sweeps one named backfill"),
    (("jobs_backfill", "--pending", "--status", "failed"), USAGE, "go with --list only"),
    (("jobs_backfill", "--list", "--status", "done"), USAGE, "invalid choice: 'done'"),
    (("jobs_backfill", "--list", "--limit", "x"), USAGE, "invalid int value"),
    (("jobs_backfill", "--list", "--limit", "99999999999999999999"), CODED, "X_JOB_ARGUMENT_INVALID"),
    (("jobs_backfill", "--list", "--name", "a\x00b"), CODED, "X_JOB_ARGUMENT_INVALID"),
    (("jobs_backfill", "x" * 100_000, "--write"), CODED, "X_BACKFILL_UNKNOWN"),
    (("jobs_backfill", "q\x00"), CODED, "X_BACKFILL_UNKNOWN"),
    # jobs_dev
    (("jobs_dev", "--metrics-port", "0"), USAGE, "is not a TCP port"),
    (("jobs_dev", "--concurrency", "x"), USAGE, "is not a whole number in 1..1000"),
    (("jobs_dev", "--async-concurrency", "x"), USAGE, "is not a whole number in 0..10000"),
    (("jobs_dev", "--drain-deadline", "nope"), USAGE, "is not a duration"),
]


@pytest.mark.parametrize(
    ("argv", "status", "fragment"), TABLE, ids=[" ".join(a)[:60].replace("\x00", "NUL") for a, _, _ in TABLE]
)
def test_a_bad_flag_is_a_usage_or_coded_error(
    pg: Env[PostgresDriver],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv: tuple[str, ...],
    status: int,
    fragment: str,
) -> None:
    monkeypatch.chdir(tmp_path)  # a manifest that did get written lands here, not in the checkout
    code, said, _ = run(*argv)
    assert code == status, said
    assert fragment in said, said
    assert "Traceback" not in said
    assert not list(tmp_path.iterdir())  # a refused --write wrote nothing


def test_a_metrics_port_already_taken_is_a_coded_error(pg: Env[PostgresDriver]) -> None:
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        for command in ("jobs_worker", "jobs_dev"):
            code, said, _ = run(command, "--metrics-port", port)
            assert code == CODED and "X_JOB_ARGUMENT_INVALID" in said and "--metrics-port" in said, said


# The real manage.py, one bad command line per command, all at once: the process's exit status, the
# message on stderr, and no traceback.
PROCESSES = [
    (("jobs", "list", "--created-from", "99999999999999999999"), USAGE, "outside 0001-01-01..9999-12-31"),
    (("jobs", "stats", "--since", "9999999999999999999d"), USAGE, "is not a window of 0 to 3650d"),
    (("jobs", "manifest", "--write", "/missing/dir/m.json"), CODED, "X_JOB_ARGUMENT_INVALID: "),
    (("jobs", "pause", ""), CODED, "X_JOB_ARGUMENT_INVALID: "),
    (("jobs_worker", "--processes", "0"), CODED, "X_INVARIANT: "),
    (("jobs_worker", "--drain-deadline", "forever"), USAGE, "is not a duration"),
    (("jobs_scheduler", "--tick-interval", "0s"), CODED, "X_INVARIANT: "),
    (("jobs_relay", "--batch-size", "0"), USAGE, "is not a whole number in 1..1000"),
    (("jobs_dev", "--concurrency", "x"), USAGE, "is not a whole number in 1..1000"),
    (("jobs_backfill", "--pending", "--list"), USAGE, "exactly one of --all, --pending, --list"),
    (("jobs_backfill", "--list", "--limit", "0"), CODED, "X_JOB_ARGUMENT_INVALID: "),
]


@pytest.mark.slow
def test_the_real_manage_py_exits_with_the_status_and_no_traceback(pg: Env[PostgresDriver], tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.e2e.pg_settings",
        "ULTIMATE_JOBS_TEST_DB": connection.settings_dict["NAME"],
        "PYTHONPATH": str(REPO),
    }
    started = [
        Child(" ".join(argv), [sys.executable, str(REPO / "manage.py"), *argv], env, cwd=tmp_path)
        for argv, _, _ in PROCESSES
    ]
    try:
        for (argv, status, fragment), process in zip(PROCESSES, started, strict=True):
            code = process.wait(timeout=120)
            process.finished_lines()
            assert code == status, (argv, process.describe())
            assert fragment in process.stderr, (argv, process.describe())
            assert "Traceback" not in process.stderr and "CommandError" not in process.stderr, process.describe()
    finally:
        for process in started:
            process.close()
    assert not list(tmp_path.iterdir())


# -- generated values ----------------------------------------------------------------------------

ANY_TEXT = st.text(alphabet=st.characters(exclude_categories=()), max_size=40)  # NUL and lone surrogates too
NUMBERS = st.one_of(st.integers().map(str), st.from_regex(r"-?[0-9]{1,40}", fullmatch=True))
INSTANTS = st.datetimes(timezones=st.sampled_from([None, UTC])).map(lambda d: d.isoformat())
VALUES = st.one_of(ANY_TEXT, NUMBERS, INSTANTS, st.uuids().map(str), st.sampled_from(["", " ", "-", "--json"]))
LIST_FLAGS = st.sampled_from(
    [
        "--created-from",
        "--created-to",
        "--limit",
        "--queue",
        "--name",
        "--state",
        "--tenant",
        "--id-prefix",
        "--after",
        "--before",
    ]
)
DURATIONS = st.one_of(
    ANY_TEXT,
    st.from_regex(r"[0-9]{1,45}(\.[0-9]{1,6})?(ms|s|m|h|d|w)", fullmatch=True),
    st.integers(min_value=0).map(lambda n: f"{n}d"),
)
IDS = st.one_of(
    VALUES,
    st.uuids().map(lambda u: str(u).upper()),
    st.uuids().map(lambda u: u.hex),
    st.from_regex(r"[0-9a-fA-F-]{30,40}", fullmatch=True),
)
GENERATED = settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture
def one_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    """``manage.py jobs`` builds its parser once for the test, not once per example: every example's argv is
    parsed by the parser ``call_command`` builds — the same one each time, and building it (argparse with
    every subcommand, each help string through gettext) costs more than the run it parses for."""
    from ultimate_jobs.management.commands.jobs import Command

    build = Command.create_parser
    built: dict[tuple[str, str], Any] = {}

    def create_parser(self: Command, prog_name: str, subcommand: str, **kwargs: Any) -> Any:
        assert not kwargs, kwargs  # call_command passes none; a keyword would make another parser
        if (prog_name, subcommand) not in built:
            built[prog_name, subcommand] = build(self, prog_name, subcommand)
        return built[prog_name, subcommand]

    monkeypatch.setattr(Command, "create_parser", create_parser)


def assert_answered(argv: list[str]) -> None:
    """The run succeeded, or exited 2 with argparse's message, or exited 1 naming a code."""
    code, said, out = run("jobs", *argv)
    assert "Traceback" not in said
    if code == USAGE:
        assert said.startswith("Error: "), said
    elif code == CODED:
        assert CODE.search(said), said
    else:
        assert code == 0, said
    if code != USAGE and "--json" in argv:
        json.loads(out)  # a result or {"error": …}: JSON on stdout either way


@GENERATED
@given(pairs=st.lists(st.tuples(LIST_FLAGS, VALUES), max_size=3), as_json=st.booleans())
def test_generated_list_flags_are_answered(
    pg: Env[PostgresDriver], one_parser: None, pairs: list[tuple[str, str]], as_json: bool
) -> None:
    argv = ["list", *(part for pair in pairs for part in pair)]
    assert_answered([*argv, "--json"] if as_json else argv)


@GENERATED
@given(since=DURATIONS, as_json=st.booleans())
def test_generated_stats_windows_are_answered(
    pg: Env[PostgresDriver], one_parser: None, since: str, as_json: bool
) -> None:
    assert_answered(["stats", "--since", since, *(["--json"] if as_json else [])])


@GENERATED
@given(job_id=IDS, as_json=st.booleans())
def test_generated_show_ids_are_answered(pg: Env[PostgresDriver], one_parser: None, job_id: str, as_json: bool) -> None:
    assert_answered(["show", job_id, *(["--json"] if as_json else [])])
