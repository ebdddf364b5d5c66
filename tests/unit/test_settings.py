"""``settings.ULTIMATE_JOBS`` means what it says: every key has a reader, every value no reader accepts is
a system-check Error ``ultimate_jobs.<CODE>`` whose hint says the fix, ``OUTBOX`` installs the outbox at
start-up, and the settings this repository runs under pass the check."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.apps import apps
from django.core.checks import Error
from django.core.management import ManagementUtility, call_command, get_commands
from django.test import override_settings

from tests.conftest import JobsEnv
from tests.helpers import command
from ultimate_jobs import JobRun, job
from ultimate_jobs.apps import check_settings
from ultimate_jobs.conf import (
    KNOWN_KEYS,
    JobsSettings,
    Retention,
    SettingError,
    build_driver,
    driver_resolution,
    jobs_settings,
)
from ultimate_jobs.core.routing import DirectRouter, jobs_router
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.errors import OutboxNoTxError
from ultimate_jobs.guards.limits import LimitConfig
from ultimate_jobs.outbox import OutboxRouter, set_outbox_store, uninstall_outbox
from ultimate_jobs.outbox.boot import install_outbox_from_settings

MEMORY = {"DRIVER": "memory"}


def errors_for(config: object) -> list[Error]:
    with override_settings(ULTIMATE_JOBS=config):
        found = check_settings()
    assert all(isinstance(e, Error) for e in found)
    return found  # type: ignore[return-value]


def ids_for(config: object) -> list[str]:
    return [e.id for e in errors_for(config)]


class LeaselessDriver(MemoryDriver):
    """A driver without a lease store (as the Redis driver will be)."""

    @property
    def leases(self) -> None:  # type: ignore[override]
        return None


def leaseless_driver() -> LeaselessDriver:
    """A driver factory ``DRIVER`` can name."""
    return LeaselessDriver()


class RatelessDriver(MemoryDriver):
    """A driver that keeps no rate schedules."""

    @property
    def rates(self) -> None:  # type: ignore[override]
        return None


def rateless_driver() -> RatelessDriver:
    """A driver factory ``DRIVER`` can name."""
    return RatelessDriver()


NOT_CALLABLE = "a string, not a factory"


# -- the settings this repository runs under -----------------------------------------------------------


def test_the_suites_settings_pass_every_check() -> None:
    assert check_settings() == []
    call_command("check", verbosity=0)  # every registered check, as manage.py check runs them


@pytest.mark.parametrize("module", ["demo_project.settings", "tests.e2e.pg_settings", "tests.e2e.slow_ack_settings"])
def test_the_other_settings_modules_pass_the_check(module: str) -> None:
    config = __import__(module, fromlist=["ULTIMATE_JOBS"]).ULTIMATE_JOBS
    assert errors_for(config) == []


def test_nothing_set_reads_as_the_documented_defaults() -> None:
    with override_settings(ULTIMATE_JOBS=None):
        config = jobs_settings()
    assert (config.driver, config.database, config.outbox, config.environment) == (
        "postgres",
        "default",
        "off",
        "production",
    )
    assert (config.drain_deadline_ms, config.visibility_timeout_ms, config.limits) == (25_000, 30_000, LimitConfig())
    day = 86_400_000
    assert config.retention.finished() == {"done": 7 * day, "failed": 30 * day, "cancelled": 30 * day, "dead": 30 * day}
    assert (config.retention.outbox_ms, config.retention.batch) == (7 * day, 1_000)


def test_every_known_key_reads_into_its_typed_value() -> None:
    config = {
        "DRIVER": "memory",
        "DATABASE": "default",
        "REDIS_URL": "rediss://:secret@cache.internal:6380/2",
        "QUEUES": {"default": 8, "emails": 2},
        "FAIR_QUEUES": ["imports", "payments"],
        "ASYNC_CONCURRENCY": {"default": 500, "emails": 0},
        "OUTBOX": "required",
        "CONTEXT": "demo_project.shop.services.shop_services",
        "LIMITS": {
            "PER_TENANT": 2,
            "PER_QUEUE": {"emails": 4},
            "GLOBAL": 16,
            "RATE_PER_TENANT": (10, "1s"),
            "FLEET_PER_TENANT": {"payments": 5},
        },
        "DRAIN_DEADLINE": "10s",
        "ENVIRONMENT": "staging",
        "MODULES": ["tests.unit.fixtures_jobs"],
        "VISIBILITY_TIMEOUT": "1m",
        "METRICS_PUBLIC": False,
        "METRICS_TOKEN": "s3cret",
        "RETENTION": {"DONE": "1d", "FAILED": None, "DEAD": "90d", "OUTBOX": "12h", "BATCH": 500},
        "WORKER_GC": "python",
        "EVENT_LOOP": "asyncio",
        "PREPARED_STATEMENTS": False,
    }
    assert set(config) == KNOWN_KEYS
    assert errors_for(config) == []
    with override_settings(ULTIMATE_JOBS=config):
        read = jobs_settings()
    assert read.redis_url == "rediss://:secret@cache.internal:6380/2"
    assert (read.queues, read.async_concurrency) == ({"default": 8, "emails": 2}, {"default": 500, "emails": 0})
    assert read.fair_queues == {"imports", "payments"}
    assert read.limits == LimitConfig(
        per_tenant=2, per_queue={"emails": 4}, global_=16, rate_per_tenant=(10, "1s"), fleet_per_tenant={"payments": 5}
    )
    assert (read.drain_deadline_ms, read.visibility_timeout_ms, read.environment) == (10_000, 60_000, "staging")
    assert read.modules == ("tests.unit.fixtures_jobs",)
    assert (read.worker_gc, read.event_loop, read.prepared_statements) == ("python", "asyncio", False)
    day = 86_400_000
    assert read.retention == Retention(
        done_ms=day, failed_ms=None, cancelled_ms=30 * day, dead_ms=90 * day, outbox_ms=day // 2, batch=500
    )


# -- a value no reader accepts ---------------------------------------------------------------------------

KEY = "ultimate_jobs.X_SETTINGS_KEY_UNKNOWN"
VALUE = "ultimate_jobs.X_SETTINGS_VALUE_INVALID"
DRIVER = "ultimate_jobs.X_SETTINGS_DRIVER_UNKNOWN"
LIMITS = "ultimate_jobs.X_SETTINGS_LIMITS_INVALID"
REDIS = "ultimate_jobs.X_SETTINGS_REDIS_URL_INVALID"
ENVIRONMENT = "ultimate_jobs.X_SETTINGS_ENVIRONMENT_INVALID"
CONTEXT = "ultimate_jobs.X_SETTINGS_CONTEXT_UNIMPORTABLE"

# Each row: one bad value on top of the memory driver, and the one check id it fails.
BAD_VALUES: list[tuple[str, Any, str]] = [
    ("DRIVER", "mongo", DRIVER),
    ("DRIVER", 3, DRIVER),
    ("DRIVER", "nowhere.at_all.driver", DRIVER),
    ("DRIVER", "tests.unit.test_settings.NOT_CALLABLE", DRIVER),
    ("DATABASE", "", VALUE),
    ("DATABASE", 0, VALUE),
    ("QUEUES", {"default": 0}, VALUE),
    ("QUEUES", {"default": True}, VALUE),
    ("QUEUES", ["default"], VALUE),
    ("FAIR_QUEUES", "imports", VALUE),
    ("FAIR_QUEUES", ["imports", ""], VALUE),
    ("FAIR_QUEUES", [3], VALUE),
    ("ASYNC_CONCURRENCY", {"default": -1}, VALUE),
    ("ASYNC_CONCURRENCY", {"default": 10_001}, VALUE),
    ("ASYNC_CONCURRENCY", {"default": True}, VALUE),
    ("ASYNC_CONCURRENCY", {"": 5}, VALUE),
    ("ASYNC_CONCURRENCY", 500, VALUE),
    ("OUTBOX", "on", VALUE),
    ("OUTBOX", True, VALUE),
    ("CONTEXT", "not_dotted", VALUE),
    ("CONTEXT", 42, VALUE),
    ("CONTEXT", "nowhere.at_all.factory", CONTEXT),
    ("CONTEXT", "tests.unit.test_settings.NOT_CALLABLE", CONTEXT),
    ("LIMITS", "16", LIMITS),
    ("LIMITS", {"PER_TENNANT": 2}, LIMITS),
    ("LIMITS", {"PER_TENANT": 0}, LIMITS),
    ("LIMITS", {"GLOBAL": "16"}, LIMITS),
    ("LIMITS", {"PER_QUEUE": [4]}, LIMITS),
    ("LIMITS", {"FLEET_PER_TENANT": {"payments": 0}}, LIMITS),
    ("LIMITS", {"FLEET_PER_TENANT": ["payments"]}, LIMITS),
    ("LIMITS", {"PER_QUEUE": {"emails": 0}}, LIMITS),
    ("LIMITS", {"RATE_PER_TENANT": 10}, LIMITS),
    ("LIMITS", {"RATE_PER_TENANT": (10, "soon")}, LIMITS),
    ("LIMITS", {"RATE_PER_TENANT": (10, 0)}, LIMITS),
    ("DRAIN_DEADLINE", "soon", VALUE),
    ("DRAIN_DEADLINE", -1, VALUE),
    ("VISIBILITY_TIMEOUT", 0, VALUE),
    ("VISIBILITY_TIMEOUT", True, VALUE),
    ("ENVIRONMENT", "", ENVIRONMENT),
    ("ENVIRONMENT", "prod env", ENVIRONMENT),
    ("ENVIRONMENT", 7, ENVIRONMENT),
    ("ENVIRONMENT", "x" * 65, ENVIRONMENT),
    ("MODULES", "shop.jobs", VALUE),
    ("MODULES", [3], VALUE),
    ("MODULES", 3, VALUE),
    ("REDIS_URL", "127.0.0.1:6379", REDIS),
    ("REDIS_URL", "http://cache:6379/0", REDIS),
    ("REDIS_URL", "redis://", REDIS),
    ("REDIS_URL", "redis://cache:port/0", REDIS),
    ("REDIS_URL", "redis://cache:99999/0", REDIS),
    ("REDIS_URL", "redis://cache:6379/zero", REDIS),
    ("REDIS_URL", "redis://cache:6379/0 ", REDIS),
    ("REDIS_URL", "unix://", REDIS),
    ("REDIS_URL", None, REDIS),
    ("METRICS_PUBLIC", "yes", VALUE),
    ("METRICS_TOKEN", "  ", VALUE),
    ("RETENTION", "7d", VALUE),
    ("RETENTION", {"DONE": "soon"}, VALUE),
    ("RETENTION", {"DONE": 0}, VALUE),
    ("RETENTION", {"DEAD": "500ms"}, VALUE),
    ("RETENTION", {"RUNNING": "1d"}, VALUE),
    ("RETENTION", {"done": "7d"}, VALUE),
    ("RETENTION", {"BATCH": 0}, VALUE),
    ("RETENTION", {"BATCH": 1_000_000}, VALUE),
    ("RETENTION", {"BATCH": True}, VALUE),
    ("WORKER_GC", "off", VALUE),
    ("WORKER_GC", False, VALUE),
    ("EVENT_LOOP", "trio", VALUE),
    ("EVENT_LOOP", None, VALUE),
    ("PREPARED_STATEMENTS", "yes", VALUE),
    ("PREPARED_STATEMENTS", None, VALUE),
]


@pytest.mark.parametrize(("key", "value", "check_id"), BAD_VALUES, ids=[f"{k}={v!r}"[:60] for k, v, _ in BAD_VALUES])
def test_a_bad_value_is_one_check_error_naming_the_key_and_the_fix(key: str, value: Any, check_id: str) -> None:
    (error,) = errors_for({**MEMORY, key: value})
    assert error.id == check_id
    assert f"ULTIMATE_JOBS[{key!r}]" in error.msg
    assert error.hint  # the fix
    assert error.obj == "settings.ULTIMATE_JOBS"


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:6379/0", "redis://cache", "rediss://user:pw@cache:6380/15", "unix:///run/redis.sock"]
)
def test_a_redis_url_of_the_right_shape_passes(url: str) -> None:
    assert errors_for({**MEMORY, "REDIS_URL": url}) == []


def test_a_typoed_key_is_named_with_the_key_it_probably_meant() -> None:
    (error,) = errors_for({**MEMORY, "QUEUE": {"default": 2}})
    assert error.id == KEY
    assert "ULTIMATE_JOBS['QUEUE'] is not a setting; did you mean 'QUEUES'" in error.msg
    assert "QUEUES" in error.hint


def test_settings_that_are_not_a_dict_are_one_error() -> None:
    (error,) = errors_for(["DRIVER", "memory"])
    assert error.id == VALUE
    assert "settings.ULTIMATE_JOBS is a list" in error.msg


def test_every_problem_is_reported_at_once() -> None:
    ids = ids_for({"DRIVER": "mongo", "QUEUES": {"q": 0}, "OUTBOX": "on", "TYPO": 1, "ENVIRONMENT": ""})
    assert sorted(ids) == sorted([KEY, DRIVER, VALUE, VALUE, ENVIRONMENT])


def test_metrics_public_with_a_token_is_refused() -> None:
    (error,) = errors_for({**MEMORY, "METRICS_PUBLIC": True, "METRICS_TOKEN": "t"})
    assert error.id == VALUE
    assert "drop one of them" in error.hint


def test_where_the_setting_is_read_the_same_refusal_is_x_invariant_with_its_fix() -> None:
    with override_settings(ULTIMATE_JOBS={**MEMORY, "LIMITS": {"PER_TENANT": 0}}), pytest.raises(SettingError) as err:
        jobs_settings()
    assert err.value.code == "X_INVARIANT"
    assert err.value.meta == {"key": "LIMITS", "check": "X_SETTINGS_LIMITS_INVALID"}
    assert "ULTIMATE_JOBS['LIMITS']" in err.value.message and "write e.g." in err.value.message


# -- what only the rest of the project can answer ----------------------------------------------------------


def test_a_database_alias_not_in_databases_is_refused() -> None:
    (error,) = errors_for({**MEMORY, "DATABASE": "replica"})
    assert error.id == "ultimate_jobs.X_SETTINGS_DATABASE_UNKNOWN"
    assert "'replica' is not an alias of settings.DATABASES" in error.msg
    assert "['default']" in error.hint


@pytest.mark.parametrize(
    ("config", "users"),
    [
        ({"DRIVER": "postgres"}, "the postgres driver need"),
        ({"DRIVER": "memory", "OUTBOX": "optional"}, "the outbox need"),
        ({"DRIVER": "postgres", "OUTBOX": "required"}, "the postgres driver and the outbox need"),
    ],
)
def test_postgres_features_on_another_database_are_refused(
    config: dict[str, str], users: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ultimate_jobs.checks.connections", VendorConnections("mysql"))
    (error,) = errors_for(config)
    assert error.id == "ultimate_jobs.X_SETTINGS_DATABASE_NOT_POSTGRES"
    assert error.msg.startswith(users)
    assert errors_for({"DRIVER": "memory", "OUTBOX": "off"}) == []


def test_the_outbox_stages_on_sqlite_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ultimate_jobs.checks.connections", VendorConnections("sqlite"))
    assert errors_for({"DRIVER": "sqlite", "OUTBOX": "required"}) == []
    (error,) = errors_for({"DRIVER": "postgres", "OUTBOX": "required"})
    assert error.msg.startswith("the postgres driver need")


class VendorConnections:
    """``django.db.connections`` with one alias, ``default``, of ``vendor``."""

    settings = {"default": {}}

    def __init__(self, vendor: str) -> None:
        self.vendor = vendor

    def __getitem__(self, alias: str) -> Any:
        return type("Wrapper", (), {"vendor": self.vendor})()


@pytest.mark.parametrize(("vendor", "driver"), [("postgresql", "postgres"), ("sqlite", "sqlite")])
def test_an_unset_driver_follows_the_database(vendor: str, driver: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ultimate_jobs.conf.connections", VendorConnections(vendor))
    with override_settings(ULTIMATE_JOBS={}):
        assert jobs_settings().driver == driver
        assert str(driver_resolution()) == f"driver {driver!r} (DRIVER unset; DATABASES['default'] is {vendor})"
    with override_settings(ULTIMATE_JOBS={"DRIVER": "memory"}):  # a DRIVER set is taken as it is
        assert jobs_settings().driver == "memory"
        assert str(driver_resolution()) == "driver 'memory' (ULTIMATE_JOBS['DRIVER'])"


def test_the_app_leaves_djangos_check_command_alone() -> None:
    assert get_commands()["check"] == "django.core"  # not shadowed by a command of the app's own
    help_text = ManagementUtility(["manage.py", "help"]).main_help_text()
    ours = help_text.partition("[ultimate_jobs]")[2].partition("\n\n")[0].split()
    assert "jobs_worker" in ours and "check" not in ours, help_text
    out = command("check").out
    assert "System check identified no issues" in out and "ultimate_jobs" not in out, out


def test_jobs_driver_says_which_driver_the_settings_resolve_to_and_why() -> None:
    with override_settings(ULTIMATE_JOBS={"DRIVER": "memory"}):
        shown = command("jobs", "driver")
        assert (shown.code, shown.out) == (0, "driver 'memory' (ULTIMATE_JOBS['DRIVER'])\n")
        as_json = command("jobs", "driver", "--json")
        assert as_json.json == {"driver": "memory", "database": "default", "reason": "ULTIMATE_JOBS['DRIVER']"}
    with override_settings(ULTIMATE_JOBS={"DRIVER": "postgress"}):  # the check fails first; this says so too
        assert str(driver_resolution()).startswith("no driver resolves (a setting is invalid; python manage.py check")


def test_an_unset_driver_on_another_vendor_fails_the_check_naming_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ultimate_jobs.conf.connections", VendorConnections("mysql"))
    (error,) = errors_for({})
    assert error.id == "ultimate_jobs.X_SETTINGS_DRIVER_UNKNOWN"
    assert "DRIVER" in error.msg and "mysql" in error.msg
    assert "('postgres', 'sqlite', 'redis', 'memory')" in error.hint


def test_the_sqlite_driver_on_another_database_is_refused() -> None:
    (error,) = errors_for({"DRIVER": "sqlite"})  # the suite's database is PostgreSQL
    assert error.id == "ultimate_jobs.X_SETTINGS_DATABASE_NOT_SQLITE"
    assert "the sqlite driver needs SQLite" in error.msg and "'postgres'" in error.hint


def test_jobs_driver_says_an_unset_driver_followed_the_database() -> None:
    with override_settings(ULTIMATE_JOBS={}):
        out = command("jobs", "driver").out
    assert out == "driver 'postgres' (DRIVER unset; DATABASES['default'] is postgresql)\n"


def test_the_redis_driver_passes_the_check() -> None:
    assert [e for e in errors_for({"DRIVER": "redis"}) if e.id == "ultimate_jobs.X_DRIVER_UNAVAILABLE"] == []


def test_the_redis_driver_without_redis_py_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # what an install without the [redis] extra imports
    (error,) = [e for e in errors_for({"DRIVER": "redis"}) if e.id == "ultimate_jobs.X_DRIVER_UNAVAILABLE"]
    assert "needs redis-py" in error.msg and "ultimate_jobs[redis]" in error.hint
    assert "set DRIVER to 'postgres'" in error.hint and "memory" not in error.hint  # the fix names a driver to run


def test_concurrency_on_a_driver_without_leases_fails_the_check(jobs: JobsEnv) -> None:
    @job(idempotency_key=lambda i: i["id"], tenant="none", concurrency=2)
    def throttled_sync(run: JobRun[dict[str, str]]) -> None:
        return None

    for driver in ("memory", "postgres", "sqlite", "tests.unit.test_settings.leaseless_driver", "redis"):
        found = errors_for({"DRIVER": driver})
        unenforceable = [e for e in found if e.id == "ultimate_jobs.X_JOB_CONCURRENCY_UNENFORCEABLE"]
        if driver in ("memory", "postgres", "sqlite", "redis"):
            assert unenforceable == [], driver
            continue
        (error,) = unenforceable
        assert "'throttled_sync'" in error.msg and "declare concurrency" in error.msg
        assert "drop the concurrency declaration" in error.hint


def test_a_rate_limit_on_a_driver_without_rate_schedules_fails_the_check(jobs: JobsEnv) -> None:
    @job(idempotency_key=lambda i: i["id"], tenant="none", rate_limit="10/s")
    def metered_sync(run: JobRun[dict[str, str]]) -> None:
        return None

    assert [e for e in errors_for({"DRIVER": "memory"}) if "RATE_LIMIT" in e.id] == []
    (error,) = [e for e in errors_for({"DRIVER": "tests.unit.test_settings.rateless_driver"}) if "RATE_LIMIT" in e.id]
    assert error.id == "ultimate_jobs.X_JOB_RATE_LIMIT_UNENFORCEABLE"
    assert "'metered_sync'" in error.msg and "drop the rate_limit declaration" in error.hint


def test_no_job_declaring_concurrency_needs_no_lease_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ultimate_jobs.core.registry.registered", lambda kind=None: [])  # the demo shop declares one
    assert errors_for({"DRIVER": "tests.unit.test_settings.leaseless_driver"}) == []


# -- OUTBOX installs the outbox at start-up -----------------------------------------------------------------


@pytest.fixture
def outbox_reset() -> Iterator[None]:
    uninstall_outbox()
    try:
        yield
    finally:
        uninstall_outbox()
        set_outbox_store(None)


@pytest.mark.usefixtures("outbox_reset")
@pytest.mark.parametrize("mode", ["optional", "required"])
def test_outbox_optional_or_required_installs_the_router_when_the_app_starts(jobs: JobsEnv, mode: str) -> None:
    with override_settings(ULTIMATE_JOBS={**MEMORY, "OUTBOX": mode}):
        apps.get_app_config("ultimate_jobs").ready()
    router = jobs_router()
    assert isinstance(router, OutboxRouter) and router.mode == mode


@pytest.mark.usefixtures("outbox_reset")
def test_outbox_required_alone_refuses_an_enqueue_outside_a_transaction(jobs: JobsEnv) -> None:
    @job(idempotency_key=lambda i: i["id"], tenant="none")
    def ship(run: JobRun[dict[str, str]]) -> None:
        return None

    with override_settings(ULTIMATE_JOBS={**MEMORY, "OUTBOX": "required"}):
        apps.get_app_config("ultimate_jobs").ready()
    with pytest.raises(OutboxNoTxError):
        ship.enqueue({"id": "1"})
    assert jobs.driver.stats() == []  # no row was written


@pytest.mark.usefixtures("outbox_reset")
@pytest.mark.parametrize("config", [MEMORY, {**MEMORY, "OUTBOX": "off"}], ids=["default", "off"])
def test_outbox_off_or_unset_installs_nothing(config: dict[str, str]) -> None:
    with override_settings(ULTIMATE_JOBS=config):
        assert install_outbox_from_settings() is None
    assert isinstance(jobs_router(), DirectRouter)


@pytest.mark.usefixtures("outbox_reset")
def test_an_outbox_the_database_cannot_hold_installs_nothing_and_fails_the_check() -> None:
    config = {**MEMORY, "OUTBOX": "required", "DATABASE": "replica"}
    with override_settings(ULTIMATE_JOBS=config):
        assert install_outbox_from_settings() is None
    assert isinstance(jobs_router(), DirectRouter)
    assert ids_for(config) == ["ultimate_jobs.X_SETTINGS_DATABASE_UNKNOWN"]


@pytest.mark.parametrize("driver", ["memory", "postgres", "redis"])
def test_the_built_driver_serves_the_fair_queues_the_settings_name(driver: str) -> None:
    """(The SQLite driver's build is tests/sqlite's: this suite's database is Postgres.)"""
    built = build_driver(JobsSettings(driver=driver, fair_queues=frozenset({"imports"})))
    assert built.fair_queues == {"imports"}


def test_prepared_statements_behind_a_transaction_pooler_are_a_warning_until_turned_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django.db import connections

    postgres = {"DRIVER": "postgres"}
    with override_settings(ULTIMATE_JOBS=postgres):
        assert check_settings() == []  # no pooler said: prepared statements on
    default = connections.settings["default"]
    monkeypatch.setitem(default, "DISABLE_SERVER_SIDE_CURSORS", True)
    with override_settings(ULTIMATE_JOBS=postgres):
        (warning,) = check_settings()
    assert warning.id == "ultimate_jobs.X_SETTINGS_PREPARED_BEHIND_POOLER"
    assert "PREPARED_STATEMENTS" in (warning.hint or "") and not isinstance(warning, Error)
    with override_settings(ULTIMATE_JOBS={**postgres, "PREPARED_STATEMENTS": False}):
        assert check_settings() == []
    monkeypatch.setitem(default, "OPTIONS", {**default.get("OPTIONS", {}), "prepare_threshold": None})
    with override_settings(ULTIMATE_JOBS=postgres):
        assert check_settings() == []  # the project chose psycopg's rule itself


def test_prepared_statements_off_build_a_driver_that_prepares_nothing() -> None:
    built = build_driver(JobsSettings(driver="postgres", prepared_statements=False))
    assert built.executor.prepared is False  # type: ignore[attr-defined]
    assert build_driver(JobsSettings(driver="postgres")).executor.prepared is True  # type: ignore[attr-defined]
