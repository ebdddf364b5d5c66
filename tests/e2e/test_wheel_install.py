"""The package as a user gets it, built from a copy of this checkout (a build never writes into the real one):

- the wheel builds without a setuptools warning, and carries what PyPI shows: the SPDX license
  expression, an author, the project URLs, every supported Python, the ``[testing]`` extra's pytest 9 and
  pytest-django, and a long description whose links all lead somewhere;
- the README's "Your first job", followed as written from the checkout — its shell blocks run in one
  shell, each file block written where its first line says — reaches the worker's ``completed`` line, on
  SQLite (``startproject``'s database) and on PostgreSQL; on SQLite the README's pytest snippet
  ("Testing") then passes in the same project, with the ``[testing]`` extra;
- a ``@job`` and a Django ``@task`` through ``django.tasks`` complete in a fresh ``startproject`` on
  Postgres, and ``get_result()`` answers SUCCESSFUL.

``make test`` runs the suite on Django 5.2 / Python 3.11 (with the ``django-tasks`` backport, our
``[tasks]`` extra) and on Django 6.1 / Python 3.12, so each of these runs once on each: the README's
``python3`` is the leg's Python, whose newest supported Django pip picks. pip's own cache serves the
dependencies; what it lacks comes from the package index, as for a user.
"""

from __future__ import annotations

import email
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import django
import psycopg
import pytest
from django.conf import settings
from packaging.requirements import Requirement

import ultimate_jobs
from tests.helpers import Child, eventually
from tests.readme import Block, blocks, section

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60.0
FIRST_JOB_S = 420.0
"""How long the README's first job may take, from its first command (a virtualenv, a wheel build, a
``pip install`` of every dependency) to the worker's ``completed`` line."""
NOT_IN_A_CHECKOUT = shutil.ignore_patterns(
    ".git", ".venv", ".venv-*", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "var", ".sqlite", ".demo"
)
WARNING = re.compile(r"\w+Warning\b")
"""A Python warning in the build's output (``SetuptoolsDeprecationWarning: …``); pip's own ``WARNING:``
lines about this machine's package indexes are not the package's."""
COMPLETED = re.compile(r"^\d\d:\d\d:\d\d completed\s+send_welcome\b", re.M)
FILE_BLOCK = re.compile(r"^# (?P<path>[\w./-]+\.(?:py|ini|toml|cfg))\b(?P<rest>.*)$")
PG_ONLY = "PostgreSQL only"

APP_JOBS = """
from ultimate_jobs import JobRun, job


@job(idempotency_key=lambda i: f"greet:{i['name']}", tenant="none")
def greet(run: JobRun) -> str:
    return f"hello {run.input['name']}"
"""

APP_TASKS = """
try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task


@task
def add(a: int, b: int) -> int:
    return a + b
"""

ENQUEUE = """
from shop.jobs import greet
from shop.tasks import add
print(greet.enqueue({"name": "ada"}).id)
print(add.enqueue(2, 3).id)
"""

RESULT = """
import sys
from shop.tasks import add
from ultimate_jobs.models import Job
result = add.get_result(sys.argv[-1])
print(result.status, result.return_value if result.is_finished else "-", Job.objects.get(id=sys.argv[-2]).state)
"""


def clean_env() -> dict[str, str]:
    """The environment a user's shell would have: not this suite's settings module, import path or pytest."""
    return {
        k: v
        for k, v in os.environ.items()
        if k not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH", "VIRTUAL_ENV") and not k.startswith("PYTEST_")
    }


def run(cmd: list[str], cwd: Path, timeout: float = 300, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env if env is not None else clean_env()
    )
    assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def checkout_copy(into: Path) -> Path:
    """A copy of this checkout as a clone has it — no virtualenvs, caches or build output — at
    ``into/ultimate_jobs``."""
    return Path(shutil.copytree(ROOT, into / "ultimate_jobs", ignore=NOT_IN_A_CHECKOUT, symlinks=True))


def build_wheel(checkout: Path, dist: Path) -> tuple[Path, str]:
    """``pip wheel`` of ``checkout`` into ``dist``: the wheel, and everything the build printed."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--verbose", "-w", str(dist), str(checkout)],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(),
    )
    log = f"{done.stdout}\n{done.stderr}"
    assert done.returncode == 0, f"pip wheel exited {done.returncode}:\n{log}"
    (wheel,) = dist.glob("ultimate_jobs-*.whl")
    return wheel, log


@pytest.fixture
def database() -> Iterator[str]:
    """A database name of the test's own on the suite's server (none by that name at the start), dropped
    afterwards."""
    base = settings.DATABASES["default"]
    # one per pytest-xdist worker too: two wheel tests of one run may be in flight at once
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    run = os.environ.get("ULTIMATE_JOBS_TEST_DB", "ultimate_jobs")
    name = f"{run}_wheel_{django.VERSION[0]}{django.VERSION[1]}_{worker}"
    params = {"host": base["HOST"], "port": base["PORT"], "user": base["USER"], "dbname": "postgres"}
    with psycopg.connect(**params, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    yield name
    with psycopg.connect(**params, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def create(name: str) -> None:
    base = settings.DATABASES["default"]
    params = {"host": base["HOST"], "port": base["PORT"], "user": base["USER"], "dbname": "postgres"}
    with psycopg.connect(**params, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')


# -- the wheel itself --------------------------------------------------------------------------------


def test_the_wheel_builds_without_a_warning_and_carries_what_pypi_shows(tmp_path: Path) -> None:
    wheel, log = build_wheel(checkout_copy(tmp_path), tmp_path / "dist")
    assert WARNING.findall(log) == [], log
    assert wheel.name == f"ultimate_jobs-{ultimate_jobs.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_string(archive.read(name).decode())

    assert metadata["License-Expression"] == "MIT"
    classifiers = metadata.get_all("Classifier") or []
    assert [c for c in classifiers if c.startswith("License ::")] == []
    python = re.compile(r"Programming Language :: Python :: (3\.\d+)")
    versions = [m[1] for m in map(python.fullmatch, classifiers) if m]
    assert versions == ["3.11", "3.12", "3.13"]
    assert metadata["Author"] == "The ultimate_jobs maintainers"
    urls = dict(u.split(", ", 1) for u in metadata.get_all("Project-URL") or [])
    assert set(urls) == {"Source", "Documentation"}

    description = metadata.get_payload()
    assert isinstance(description, str) and description.startswith("# ultimate_jobs")
    targets = re.findall(r"\]\(([^)\s]+)\)", description)
    assert [t for t in targets if not t.startswith(("#", "https://"))] == []
    assert f"]({urls['Source']}docs/jobs.md)" in description
    assert "](#your-first-job)" in description  # a link within the page stays one

    testing = [Requirement(r) for r in metadata.get_all("Requires-Dist") or [] if 'extra == "testing"' in r]
    by_name = {r.name: r for r in testing}
    assert set(by_name) == {"pytest", "pytest-django"}
    assert by_name["pytest"].specifier.contains("9.0.3") and by_name["pytest"].specifier.contains("8.4.2")


# -- the README, followed as written --------------------------------------------------------------------


def readme_script(followed: list[Block], *, postgres: bool) -> str:
    """The shell session that follows ``followed``: each ``sh`` block as it is, each file block written
    (or added at the end, when its first line says so) to the file its first line names; the printed
    output (``text``) is what to expect, not a step. Off PostgreSQL, the blocks marked "PostgreSQL only"
    are left out, as the README says."""
    lines = ["set -e"]
    for block in followed:
        if block.lang == "text" or (PG_ONLY in block.first_line and not postgres):
            continue
        if block.lang == "sh":
            lines.append(block.body)
            continue
        target = FILE_BLOCK.match(block.first_line)
        assert block.lang in ("python", "ini") and target, f"the README does not say where this goes:\n{block.body}"
        into = ">>" if "add at the end" in target["rest"] else ">"
        lines.append(f"cat {into} {target['path']} <<'README_BLOCK'\n{block.body}README_BLOCK")
    return "\n".join(lines) + "\n"


def own_database(script: str, name: str) -> str:
    """The README's ``shop`` database is named ``name`` instead, so runs on one server never share one."""
    for written in ("createdb -h 127.0.0.1 -U postgres shop ", '"NAME": "shop",'):
        assert script.count(written) == 1, f"the README's PostgreSQL steps changed: {written!r}"
    script = script.replace("createdb -h 127.0.0.1 -U postgres shop ", f"createdb -h 127.0.0.1 -U postgres {name} ")
    return script.replace('"NAME": "shop",', f'"NAME": "{name}",')


def readme_pytest_blocks() -> list[Block]:
    """The README's pytest part of "Testing": from its first shell block to its last (``pytest``)."""
    found = blocks(section("Testing"))
    shells = [i for i, b in enumerate(found) if b.lang == "sh"]
    assert len(shells) >= 2 and found[shells[-1]].body.strip() == "pytest", found
    return found[shells[0] : shells[-1] + 1]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_your_first_job_as_the_readme_writes_it(engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    postgres = engine == "postgresql"
    followed = blocks(section("Your first job"))
    assert any(PG_ONLY in b.first_line for b in followed)  # the PostgreSQL steps are marked, or SQLite would run them
    script = readme_script(followed, postgres=postgres)
    if postgres:
        script = own_database(script, request.getfixturevalue("database"))
    checkout = checkout_copy(tmp_path)
    project = tmp_path / "mysite"
    shims = tmp_path / "bin"  # the README's python3 is this leg's Python
    shims.mkdir()
    (shims / "python3").symlink_to(sys._base_executable)  # type: ignore[attr-defined]
    env = clean_env() | {"PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}
    (tmp_path / "first_job.sh").write_text(script)

    started = time.monotonic()
    shell = Child(f"first job ({engine})", ["bash", str(tmp_path / "first_job.sh")], env, cwd=checkout)
    try:

        def completed() -> bool:
            if shell.popen.poll() is not None:
                raise RuntimeError(f"the README's commands stopped: {shell.output()}")
            return bool(COMPLETED.search(shell.stderr))

        eventually(completed, timeout=FIRST_JOB_S, interval=0.2)
        took = time.monotonic() - started
        shell.signal_group(signal.SIGINT)  # Ctrl-C, as the README says: the worker drains, the shell goes on
        code = shell.wait(timeout=WAIT_S)
    finally:
        shell.close()
    assert code == 0, shell.output()
    assert "sending the welcome mail to user 7" in shell.lines
    driver = "postgres" if postgres else "sqlite"
    assert f"— driver {driver}, database default" in "\n".join(shell.lines), shell.output()
    assert (project / "db.sqlite3").exists() != postgres

    python = str(project / ".venv" / "bin" / "python")
    versions = run([python, "-c", "import django, sys; print(*django.VERSION[:2], *sys.version_info[:2])"], project)
    assert [int(v) for v in versions.split()] == [*django.VERSION[:2], *sys.version_info[:2]]
    print(
        f"\nYour first job on {engine}, Django {django.VERSION[0]}.{django.VERSION[1]}, Python "
        f"{sys.version_info[0]}.{sys.version_info[1]}: {took:.1f} s from the first command to the completed line"
    )
    if postgres:
        return

    testing = ". .venv/bin/activate\n" + readme_script(readme_pytest_blocks(), postgres=False)
    (tmp_path / "testing.sh").write_text(testing)
    out = run(["bash", str(tmp_path / "testing.sh")], project, timeout=300, env=env)
    assert re.search(r"\b1 passed\b", out), out
    assert "settings: mysite.settings (from ini)" in out, out  # pytest-django set Django up with the README's settings
    pytest_version = run([python, "-c", "import pytest; print(pytest.__version__)"], project)
    assert int(pytest_version.split(".")[0]) >= 9, pytest_version  # the extra no longer holds pytest below 9


# -- django.tasks from the wheel -------------------------------------------------------------------------


def test_the_built_wheel_runs_a_job_and_a_django_task_in_a_fresh_project(tmp_path: Path, database: str) -> None:
    create(database)
    wheel, _ = build_wheel(checkout_copy(tmp_path), tmp_path / "dist")
    venv = tmp_path / "venv"
    run([sys._base_executable, "-m", "venv", str(venv)], cwd=tmp_path)  # type: ignore[attr-defined]
    python = str(venv / "bin" / "python")
    django_pin = f"Django=={django.get_version()}"
    extra = "[tasks]" if django.VERSION < (6, 0) else ""
    run([python, "-m", "pip", "install", "--quiet", f"{wheel}{extra}", django_pin], cwd=tmp_path)

    project = tmp_path / "project"
    project.mkdir()
    run([str(venv / "bin" / "django-admin"), "startproject", "mysite", str(project)], cwd=project)
    app = project / "shop"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "jobs.py").write_text(APP_JOBS)
    (app / "tasks.py").write_text(APP_TASKS)
    base = settings.DATABASES["default"]
    with (project / "mysite" / "settings.py").open("a") as fh:
        fh.write(
            textwrap.dedent(f"""
            INSTALLED_APPS += ["ultimate_jobs", "shop"]
            DATABASES = {{"default": {{"ENGINE": "django.db.backends.postgresql", "NAME": {database!r},
                          "USER": {base["USER"]!r}, "HOST": {base["HOST"]!r}, "PORT": {base["PORT"]!r}}}}}
            TASKS = {{"default": {{"BACKEND": "ultimate_jobs.django_tasks.JobsBackend"}}}}
            """)
        )
    manage = [python, "manage.py"]
    run([*manage, "migrate", "--verbosity", "0"], cwd=project)
    job_id, task_id = run([*manage, "shell", "-c", ENQUEUE], cwd=project).split()[-2:]

    worker = Child("jobs_worker", [*manage, "jobs_worker"], clean_env(), cwd=project)
    try:
        deadline = time.monotonic() + WAIT_S
        answer = ""
        while time.monotonic() < deadline:
            answer = run([python, "-c", _shell(RESULT), job_id, task_id], cwd=project).strip()
            if answer.startswith(("SUCCESSFUL", "FAILED")) and answer.endswith(("done", "dead", "failed")):
                break
            time.sleep(0.5)
        worker.signal(signal.SIGTERM)
        code = worker.wait(timeout=60)
    finally:
        worker.close()
    assert answer == "SUCCESSFUL 5 done", f"result {answer!r}; the worker said: {worker.describe()}"
    assert code == 0, worker.describe()


def _shell(body: str) -> str:
    """``body`` run under the project's settings (argv: job id, task id)."""
    return (
        "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'mysite.settings'); django.setup()\n" + body
    )
