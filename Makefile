# Every tool runs from the project virtualenv: .venv is Python 3.11 with Django 5.2 LTS; .venv-dj6 is
# Python 3.12 (or 3.13) with Django 6.1, the second leg of `make test`. Both are built from scratch here.
VENV := .venv
PY := $(VENV)/bin/python
VENV6 := .venv-dj6
DJANGO_LTS := Django>=5.2,<5.3
DJANGO_6 := Django>=6.1,<6.2
PYTEST_ARGS ?=
SQLITE_PYTEST_ARGS ?=
# Each leg runs on this many pytest-xdist workers, each on a database of its own (test_<name>_gw0…, a
# Redis database per worker, an SQLite file per worker). The process tests mostly wait on their children,
# so more workers than the 2 cores pays. PYTEST_WORKERS=0 runs a leg in one process.
PYTEST_WORKERS ?= 3
XDIST := -n $(PYTEST_WORKERS) --dist loadgroup
# The suite starts hundreds of Python child processes (workers, relays, management commands); a shell with
# PYTHONDONTWRITEBYTECODE set would have each one compile every module it imports again (about 0.3 s each),
# so the tests run with bytecode written (into __pycache__, which git ignores).
PYTEST_ENV := PYTHONDONTWRITEBYTECODE=
BENCH_ARGS ?=
# bench/ may not exist yet; lint it once it does.
LINT_PATHS := ultimate_jobs demo_project tests setup.py $(wildcard bench)

.PHONY: venv venv6 services browser lint test demo bench chaos

venv: $(VENV)/.installed

$(PY):
	python3 -m venv $(VENV)

# Reinstall only when requirements.txt is newer than the stamp.
$(VENV)/.installed: requirements.txt | $(PY)
	$(VENV)/bin/pip install -r requirements.txt "$(DJANGO_LTS)"
	touch $@

venv6: $(VENV6)/.installed

# Django 6.1 needs Python >= 3.12: scripts/find_python.sh finds 3.12 or 3.13 (PATH, pyenv, /usr/bin).
$(VENV6)/bin/python:
	"$$(scripts/find_python.sh 3.12 3.13)" -m venv $(VENV6)

$(VENV6)/.installed: requirements.txt | $(VENV6)/bin/python
	$(VENV6)/bin/pip install -r requirements.txt "$(DJANGO_6)"
	touch $@

services:
	scripts/ensure_services.sh

# The browser tests drive Debian's chromium through Playwright's Python package; Playwright never
# downloads a browser here. Installs chromium only when it is missing (a machine with chromium and
# no apt passes).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
		command -v apt-get >/dev/null 2>&1 || { echo "browser: chromium is missing and there is no apt-get to install it" >&2; exit 1; }; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; }

lint: venv
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(VENV)/bin/mypy ultimate_jobs
	DJANGO_SETTINGS_MODULE=tests.settings $(PY) manage.py makemigrations --check --dry-run

# The whole suite on PostgreSQL twice — Django 5.2 LTS on Python 3.11, then Django 6.1 on Python 3.12+ (lint
# runs once) — then the SQLite half (tests/sqlite) under its own settings: the driver conformance suite, the
# worker tests and the worker processes on one SQLite file. No test can hang a leg: pytest-timeout fails
# one past 300 s (setup.cfg), and its teardown kills the process groups it started.
test: venv venv6 services browser lint
	$(PYTEST_ENV) $(VENV)/bin/pytest $(XDIST) $(PYTEST_ARGS)
	$(PYTEST_ENV) $(VENV6)/bin/pytest $(XDIST) $(PYTEST_ARGS)
	$(PYTEST_ENV) $(VENV)/bin/pytest --ds=tests.sqlite_settings tests/sqlite $(XDIST) $(SQLITE_PYTEST_ARGS)

# The demo runs on the embedded default, an SQLite file under the project (.demo/shop.sqlite3, created on
# first run) — no server. make demo DATABASE_URL=postgres://postgres@127.0.0.1:5432/ultimate_jobs_demo runs
# the same scenario on the Postgres driver (the local services are started for it).
demo: venv
	@case "$$DATABASE_URL" in postgres*|pgsql*) scripts/ensure_services.sh ;; esac
	$(PY) manage.py shop_demo

# The chaos suite at full size (make test runs its short form): real workers and relays SIGKILLed and a
# private Postgres cluster crashed under 10,000 jobs and 2,000 orders; see docs/testing.md. It starts its
# own cluster, so it needs no services.
chaos: venv
	CHAOS_SIZE=full $(VENV)/bin/pytest tests/chaos -m chaos $(PYTEST_ARGS)

# make bench BENCH_ARGS=--quick for a smoke run; see bench/README.md.
bench: venv services
	$(PY) -m bench $(BENCH_ARGS)
