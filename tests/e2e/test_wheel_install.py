"""The package as a user gets it: build the wheel, install it into a fresh virtualenv beside this
suite's Django version, ``startproject``, add the app, point it at Postgres (a database of its own),
``migrate``, enqueue one ``@job`` through our handle and one Django ``@task`` through ``django.tasks``,
run ``jobs_worker`` as a subprocess, and see both complete and ``get_result()`` answer SUCCESSFUL.

``make test`` runs the suite on Django 5.2 (with the ``django-tasks`` backport, our ``[tasks]`` extra)
and on Django 6.1, so this runs once on each. The wheel is built without build isolation's download when
the running venv has setuptools, and pip's own cache serves the dependencies.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import django
import psycopg
import pytest
from django.conf import settings

from tests.helpers import Child

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60.0

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
    """The environment a user's shell would have: not this suite's settings module or import path."""
    return {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH", "VIRTUAL_ENV")}


def run(cmd: list[str], cwd: Path, timeout: float = 300) -> str:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=clean_env())
    assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture
def database() -> Iterator[str]:
    """A database of the test's own on the suite's server, dropped afterwards."""
    base = settings.DATABASES["default"]
    name = f"{os.environ.get('ULTIMATE_JOBS_TEST_DB', 'ultimate_jobs')}_wheel_{django.VERSION[0]}{django.VERSION[1]}"
    params = {"host": base["HOST"], "port": base["PORT"], "user": base["USER"], "dbname": "postgres"}
    with psycopg.connect(**params, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    yield name
    with psycopg.connect(**params, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_the_built_wheel_runs_a_job_and_a_django_task_in_a_fresh_project(tmp_path: Path, database: str) -> None:
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist), str(ROOT)], cwd=tmp_path)
    (wheel,) = dist.glob("ultimate_jobs-*.whl")

    venv = tmp_path / "venv"
    run([sys._base_executable, "-m", "venv", str(venv)], cwd=tmp_path)  # type: ignore[attr-defined]
    python = str(venv / "bin" / "python")
    django_pin = f"Django=={django.get_version()}"
    extra = "[tasks]" if django.VERSION < (6, 0) else ""
    run([python, "-m", "pip", "install", "--quiet", f"{wheel}{extra}", django_pin], cwd=tmp_path)

    run([str(venv / "bin" / "django-admin"), "startproject", "mysite", str(tmp_path)], cwd=tmp_path)
    app = tmp_path / "shop"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "jobs.py").write_text(APP_JOBS)
    (app / "tasks.py").write_text(APP_TASKS)
    base = settings.DATABASES["default"]
    with (tmp_path / "mysite" / "settings.py").open("a") as fh:
        fh.write(
            textwrap.dedent(f"""
            INSTALLED_APPS += ["ultimate_jobs", "shop"]
            DATABASES = {{"default": {{"ENGINE": "django.db.backends.postgresql", "NAME": {database!r},
                          "USER": {base["USER"]!r}, "HOST": {base["HOST"]!r}, "PORT": {base["PORT"]!r}}}}}
            TASKS = {{"default": {{"BACKEND": "ultimate_jobs.django_tasks.JobsBackend"}}}}
            """)
        )
    manage = [python, "manage.py"]
    run([*manage, "migrate", "--verbosity", "0"], cwd=tmp_path)
    job_id, task_id = run([*manage, "shell", "-c", ENQUEUE], cwd=tmp_path).split()[-2:]

    worker = Child("jobs_worker", [*manage, "jobs_worker"], clean_env(), cwd=tmp_path)
    try:
        deadline = time.monotonic() + WAIT_S
        answer = ""
        while time.monotonic() < deadline:
            answer = run([python, "-c", _shell(RESULT), job_id, task_id], cwd=tmp_path).strip()
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
