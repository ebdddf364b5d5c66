"""Prometheus series: the counters a worker moves, and the gauges read at scrape time.

Two kinds, two homes:

- counters — ``jobs_total{queue,outcome}`` and ``job_leases_lost_total{queue}`` — move in the process that
  ran the attempt (the worker), on ``prometheus_client``'s default registry (:mod:`ultimate_jobs.runtime.counters`,
  which the worker imports without the collectors);
- gauges — ``queue_depth{queue}``, ``queue_oldest_ready_seconds{queue}``, ``queue_dead_jobs{queue}`` —
  are read at scrape time by :class:`QueueStatsCollector` through ONE ``driver.stats()`` call (on
  Postgres one ``SQL_STATS`` statement for every queue), so they are fleet-wide and the same from any
  process. :func:`metrics_registry` joins both for the ``/metrics`` view;
- the rate gauges — ``rate_limit_keys{limit}``, ``rate_limit_waiting{limit}``, ``rate_limit_booked_seconds{limit}``
  — read at scrape time from the driver's rate schedules (``driver.rates.state()``) by
  :class:`RateStatsCollector`, per declared limit (never per key: one label per org would not scale);
- the outbox gauges — ``outbox_pending``, ``outbox_failed``, ``outbox_oldest_seconds`` — read at scrape
  time with one ``SQL_OUTBOX_STATS`` statement by :class:`OutboxStatsCollector`, where the jobs database
  holds an outbox (PostgreSQL, ``ULTIMATE_JOBS['OUTBOX']`` not ``"off"``).

``queue_depth`` is the rows waiting to be claimed — ``ready`` + ``delayed`` (a retry in its backoff is
``ready``, a ``delay=``/``run_at=`` enqueue is ``delayed``). Rows parked by ``step.sleep`` or
``step.wait_for_event`` (``suspended``) are waiting on time or an event, not on a worker, and are not
counted: an autoscaler must not add workers for a three-day sleep.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..contracts.operator import QueueStats
from ..contracts.protocol import JobDriver
from ..contracts.schedules import RateState
from ..core.clock import Clock
from ..core.rates import declared_rate_limits, limit_of
from ..errors import JobArgumentInvalidError
from ..runtime.counters import prime_counters

if TYPE_CHECKING:
    from ..contracts.outbox import OutboxStore


def queue_depth(stats: QueueStats) -> int:
    """The rows of one queue waiting to be claimed: ready + delayed (see the module's docstring)."""
    return stats.ready + stats.delayed


class QueueStatsCollector(Collector):
    """The queue gauges, read at scrape time with one ``driver.stats()`` call for every queue.

    ``queues`` names queues to report even with no rows (at 0): by default the registered jobs' queues
    and ``ULTIMATE_JOBS['QUEUES']``. Each scrape also primes the counters of every queue it reports
    (:func:`prime_counters`), so a registry that collects this collector first shows all five series.
    """

    def __init__(
        self,
        driver: Callable[[], JobDriver] | None = None,
        clock: Callable[[], Clock] | None = None,
        queues: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        from ..core.installed import job_clock, job_driver

        self._driver = driver or job_driver
        self._clock = clock or job_clock
        self._queues = queues or known_queues

    def describe(self) -> list[Metric]:
        """The family names only: registering never runs the stats query."""
        return list(self._families())

    def collect(self) -> Iterator[Metric]:
        stats = {s.queue: s for s in self._driver().stats()}
        now_ms = self._clock().now_ms()
        queues = sorted(set(stats) | set(self._queues()))
        prime_counters(queues)
        depth, oldest, dead = self._families()
        for queue in queues:
            row = stats.get(queue) or QueueStats(queue=queue)
            depth.add_metric([queue], queue_depth(row))
            age_ms = 0 if row.oldest_ready_ms is None else max(0, now_ms - row.oldest_ready_ms)
            oldest.add_metric([queue], age_ms / 1000)
            dead.add_metric([queue], row.dead)
        yield from (depth, oldest, dead)

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                "queue_depth",
                "Jobs waiting to be claimed (ready + delayed; suspended rows wait on time or an event).",
                labels=["queue"],
            ),
            GaugeMetricFamily(
                "queue_oldest_ready_seconds",
                "Age of the oldest due job not yet claimed, by the job clock; 0 when none is due.",
                labels=["queue"],
            ),
            GaugeMetricFamily("queue_dead_jobs", "Jobs in the dead-letter queue (state dead).", labels=["queue"]),
        )


class RateStatsCollector(Collector):
    """The rate gauges, per declared rate limit (the driver's ``rates.state()`` summed over each limit's
    keys, one statement per scrape, none when no job declares a limit): how many keys it schedules, how
    many runs wait on reserved instants, and how far ahead its busiest key is booked (0 when every key may
    start now)."""

    def __init__(self, clock: Callable[[], Clock] | None = None) -> None:
        from ..core.installed import job_clock

        self._clock = clock or job_clock

    def describe(self) -> list[Metric]:
        return list(self._families())

    def collect(self) -> Iterator[Metric]:
        from ..core.installed import job_driver

        declared = declared_rate_limits()
        store = job_driver().rates
        if not declared or store is None:  # no limit declared: no series, and no statement
            return
        by_limit: dict[str, list[RateState]] = {name: [] for name in declared}
        for state in store.state():
            name = limit_of(state.key, declared)
            if name is not None:
                by_limit[name].append(state)
        now_ms = self._clock().now_ms()
        keys, waiting, booked = self._families()
        for name, states in by_limit.items():
            keys.add_metric([name], len(states))
            waiting.add_metric([name], sum(s.reserved for s in states))
            ahead = max((s.next_at_ms - now_ms for s in states), default=0)
            booked.add_metric([name], max(0, ahead) / 1000)
        yield from (keys, waiting, booked)

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily("rate_limit_keys", "Keys a rate limit schedules starts for.", labels=["limit"]),
            GaugeMetricFamily(
                "rate_limit_waiting", "Runs waiting on an instant a rate limit reserved for them.", labels=["limit"]
            ),
            GaugeMetricFamily(
                "rate_limit_booked_seconds",
                "How far ahead a rate limit's busiest key is booked; 0 when every key may start now.",
                labels=["limit"],
            ),
        )


class OutboxStatsCollector(Collector):
    """The outbox gauges, read at scrape time with one ``store.stats()`` call. ``store`` answers the store
    to read, or ``None`` where this process has no outbox (then the series are not exported)."""

    def __init__(
        self,
        store: Callable[[], OutboxStore | None] | None = None,
        clock: Callable[[], Clock] | None = None,
    ) -> None:
        from ..core.installed import job_clock

        self._store = store or _configured_outbox
        self._clock = clock or job_clock

    def describe(self) -> list[Metric]:
        return list(self._families())

    def collect(self) -> Iterator[Metric]:
        store = self._store()
        if store is None:
            return
        stats = store.stats()
        pending, failed, oldest = self._families()
        pending.add_metric([], stats.pending)
        failed.add_metric([], stats.failed)
        age_ms = 0 if stats.oldest_pending_ms is None else max(0, self._clock().now_ms() - stats.oldest_pending_ms)
        oldest.add_metric([], age_ms / 1000)
        yield from (pending, failed, oldest)

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily("outbox_pending", "Staged enqueues committed and waiting for the relay to publish."),
            GaugeMetricFamily(
                "outbox_failed",
                "Staged enqueues set aside by a permanent publish error; retry or remove them (manage.py jobs outbox).",
            ),
            GaugeMetricFamily(
                "outbox_oldest_seconds", "Age of the oldest staged enqueue waiting to publish; 0 when none waits."
            ),
        )


def _configured_outbox() -> OutboxStore | None:
    """The process's outbox store where the jobs database holds one, else ``None``."""
    from ..conf import jobs_settings
    from ..outbox.boot import outbox_store, outbox_supported

    if jobs_settings().outbox == "off" or not outbox_supported():
        return None
    return outbox_store()


class _ProcessSeries(Collector):
    """Everything on ``prometheus_client``'s default registry: this process's counters (and the client's
    process and platform collectors)."""

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()


def known_queues() -> set[str]:
    """The queues to report even when empty: every registered job's queue and the configured ones."""
    from ..conf import jobs_settings
    from ..core import registry
    from ..core.definition import JobHandle

    queues = {h.queue for h in registry.registered("job") if isinstance(h, JobHandle)}
    return queues | set(jobs_settings().queues)


def metrics_registry(collector: QueueStatsCollector | None = None) -> CollectorRegistry:
    """A registry for one scrape: the queue gauges first (they prime the counters), then this process's
    default registry. Built per scrape, so it never joins the default registry of anyone else."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector or QueueStatsCollector())
    registry.register(OutboxStatsCollector())
    registry.register(RateStatsCollector())
    registry.register(_ProcessSeries())
    return registry


def serve_counters(port: int) -> None:
    """Serve this process's counters (``jobs_total``, ``job_leases_lost_total``) for Prometheus on ``port``
    — what ``jobs_worker --metrics-port`` runs. The queue gauges come from the web's metrics view, which
    reads them with one statement; N workers each serving them would run N.

    A port this process cannot listen on (taken, privileged, out of range) is ``X_JOB_ARGUMENT_INVALID``.
    """
    try:
        start_http_server(port, registry=REGISTRY)
    except (OSError, OverflowError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise JobArgumentInvalidError(
            f"cannot serve the counters on port {port!r}: {why}. Fix: pass a free --metrics-port",
            {"argument": "metrics_port", "value": port},
        ) from exc
