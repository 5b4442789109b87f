"""Prometheus metrics: what this node did (counters, histograms) and what the database says
(overdue jobs, last success, missed periods, stuck items, runs in progress), served on
`/metrics` by `scheduler.http`.

The daemon calls the `record_*` functions at the moment something happens; they
cost a dictionary look-up and are safe from any thread. The database-derived gauges
are read at scrape time, so every node shows the whole cluster's view of them, with
a zero for every registered job that has nothing to count (a series that appears only
once something goes wrong cannot be alerted on with `rate` or `> 0` before it does).

The series stay bounded at fleet size: a few per job. The two histograms have no `job`
label unless `per_job_histograms(True)` (`scheduler run --metrics-per-job`), which
adds 34 series per job. The runs of schedules created at run time (`@<key>`, a million
of them perhaps) share one label value, `@schedules`, in the counters, and count under
their template job in `scheduler_deferred_periods`: never a series per schedule.
"""

from __future__ import annotations

import collections
import platform
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib.metadata import PackageNotFoundError, version
from typing import Protocol

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Info
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from structlog.typing import FilteringBoundLogger

from scheduler import check
from scheduler.config import DISTRIBUTION
from scheduler.counters import LabelledCounter
from scheduler.errors import UserError
from scheduler.histograms import JobHistogram
from scheduler.states import ACTIVE_STATUSES, Delivery, Origin, RunStatus
from scheduler.store import concurrency, queries
from scheduler.store import deferred as deferred_rows
from scheduler.store import deliveries as stored_events
from scheduler.store import items as stored_items
from scheduler.store.database import Database
from scheduler.store.faults import StoreError, first_line

# The `job` label of every run of a schedule created at run time.
SCHEDULES_LABEL = "@schedules"
# `scheduler_missed_periods` counts what was recorded this long ago or later.
MISSED_WINDOW = timedelta(days=1)

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)

RUNS = LabelledCounter(
    "scheduler_runs",
    "Attempts this node brought to an outcome, by job and status "
    "(succeeded, failed, timed_out, abandoned; skipped when it recorded an overlap skip).",
    ["job", "status"],
    REGISTRY,
)
RUN_DURATION = JobHistogram(
    "scheduler_run_duration_seconds",
    "How long the job function ran, per attempt.",
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600),
    registry=REGISTRY,
)
START_LAG = JobHistogram(
    "scheduler_run_start_lag_seconds",
    "Start minus period: how late an attempt began (jitter, retries and catch-up included).",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600),
    registry=REGISTRY,
)
CLAIMS = Counter(
    "scheduler_claims",
    "Periods this node tried to claim: won (the row is ours) or lost (another node has it).",
    ["result"],
    registry=REGISTRY,
)
CATCHUP_CLAIMS = Counter(
    "scheduler_catchup_claims",
    "Periods this node claimed through catch-up (they should have run while no node did).",
    ["job"],
    registry=REGISTRY,
)
BUILD = Info(
    "scheduler_build",
    "The scheduler this node runs: version and Python.",
    registry=REGISTRY,
)
LEASES_LOST = Counter(
    "scheduler_leases_lost",
    "Runs this node stopped treating as its own because their lease could not be renewed.",
    ["job"],
    registry=REGISTRY,
)
FINAL_FAILURES = Counter(
    "scheduler_final_failures",
    "Periods whose last attempt failed or timed out on this node, with no retry left.",
    ["job"],
    registry=REGISTRY,
)
HEARTBEAT_FAILURES = Counter(
    "scheduler_heartbeat_failures",
    "Heartbeats of this node that the database did not take (its leases were not renewed).",
    registry=REGISTRY,
)
HEARTBEAT_SUCCESS = Gauge(
    "scheduler_heartbeat_last_success_timestamp_seconds",
    "When this node's heartbeat last landed (Unix time, this host's clock).",
    registry=REGISTRY,
)
ALERT_DELIVERIES = Counter(
    "scheduler_alert_deliveries",
    "Alert event delivery tries of this node: delivered, retrying (a hook failed, tried "
    "again later) or gave_up (tries ran out).",
    ["outcome"],
    registry=REGISTRY,
)


def describe_build() -> None:
    try:
        installed = version(DISTRIBUTION)
    except PackageNotFoundError:  # a source tree on PYTHONPATH, not installed
        installed = "unknown"
    BUILD.info({"version": installed, "python": platform.python_version()})


describe_build()


def per_job_histograms(enabled: bool) -> None:
    """Label the duration and start-lag histograms by job (34 series per job) or not."""
    RUN_DURATION.per_job = START_LAG.per_job = enabled


class Claimed(Protocol):
    """A won or skipped claim, as the store returns it."""

    @property
    def job(self) -> str: ...

    @property
    def origin(self) -> Origin: ...


def job_label(job: str) -> str:
    """The `job` label of a run: its job, or `@schedules` for any schedule's."""
    return SCHEDULES_LABEL if job.startswith("@") else job


def record_claims(attempted: int, won: Sequence[Claimed], skipped: Sequence[Claimed]) -> None:
    """One claim batch: `attempted` periods, of which `won` run here and `skipped` were
    recorded here as skipped; the rest were lost to other nodes."""
    CLAIMS.labels("won").inc(len(won) + len(skipped))
    CLAIMS.labels("lost").inc(attempted - len(won) - len(skipped))
    for claim in won:
        if claim.origin == Origin.CATCHUP:
            CATCHUP_CLAIMS.labels(job_label(claim.job)).inc()
    for claim in skipped:
        RUNS.inc(job_label(claim.job), RunStatus.SKIPPED.value)


def record_start(job: str, period: datetime) -> None:
    START_LAG.observe(job_label(job), max(0.0, (datetime.now(UTC) - period).total_seconds()))


def record_finish(job: str, status: str, duration_ms: int | None) -> None:
    """An attempt's outcome, once the database accepted it."""
    RUNS.inc(job_label(job), str(status))
    if duration_ms is not None:
        RUN_DURATION.observe(job_label(job), duration_ms / 1000)


def record_lease_lost(job: str) -> None:
    LEASES_LOST.labels(job_label(job)).inc()


def record_final_failure(job: str) -> None:
    FINAL_FAILURES.labels(job_label(job)).inc()


def record_heartbeat(landed: bool) -> None:
    if landed:
        HEARTBEAT_SUCCESS.set_to_current_time()
    else:
        HEARTBEAT_FAILURES.inc()


def record_delivery(outcome: str) -> None:
    ALERT_DELIVERIES.labels(outcome).inc()


class DatabaseCollector(Collector):
    """Gauges read from the database at scrape time: the same answers as `scheduler check`."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self._log: FilteringBoundLogger = structlog.get_logger("scheduler")

    def describe(self) -> Iterable[Metric]:
        return []  # no database round trip when registering

    def collect(self) -> Iterable[Metric]:
        try:
            readings = Readings.read(self._database)
        except (StoreError, UserError) as error:
            self._log.warning("metrics_unavailable", error=first_line(error))
            return []
        return readings.families()


@dataclass(frozen=True)
class Readings:
    """One scrape's answers from the database."""

    report: check.Report
    successes: Mapping[str, queries.Success]
    missed: Mapping[str, int]
    stuck: Mapping[str, int]
    running: Mapping[str, int]
    alert_events: Mapping[str, int]
    deferred: Mapping[str, int]
    pools: Sequence[concurrency.PoolState]

    @classmethod
    def read(cls, database: Database) -> Readings:
        report = check.gather(database, window=timedelta(0))
        stuck_items = stored_items.list_items(
            database, None, stuck_only=True, limit=check.STUCK_LIMIT
        )
        return cls(
            report=report,
            successes=queries.last_successes(database),
            missed=queries.count_by_job(
                database, [RunStatus.MISSED], recorded_since=report.checked_at - MISSED_WINDOW
            ),
            stuck=collections.Counter(row.job for row in stuck_items),
            running=queries.count_by_job(database, ACTIVE_STATUSES),
            alert_events=stored_events.count_by_state(database),
            deferred=deferred_rows.deferred_by_code_job(database),
            pools=concurrency.states(database),
        )

    def families(self) -> list[Metric]:
        overdue = GaugeMetricFamily(
            "scheduler_overdue_jobs",
            "Jobs whose latest expected period has not succeeded within its grace "
            "(as `scheduler check` counts them).",
            value=self.report.overdue_jobs,
        )
        last = GaugeMetricFamily(
            "scheduler_last_success_timestamp_seconds",
            "When a run of the job last finished successfully, on any node (Unix time).",
            labels=["job"],
        )
        latest: dict[str, float] = {}
        for job, success in self.successes.items():
            if success.finished_at is not None:
                label = job_label(job)
                moment = success.finished_at.timestamp()
                latest[label] = max(moment, latest.get(label, moment))
        for label, moment in sorted(latest.items()):
            last.add_metric([label], moment)
        alerts = GaugeMetricFamily(
            "scheduler_alert_events",
            "Alert events kept in the database, by delivery state (pending, delivered, "
            "failed, unrouted).",
            labels=["state"],
        )
        for state in Delivery:
            alerts.add_metric([state.value], self.alert_events.get(state.value, 0))
        watched = self.report.watched
        return [
            overdue,
            last,
            alerts,
            *self._pool_families(),
            _per_job(
                "scheduler_missed_periods",
                "Periods recorded missed (older than the job's catch-up window) in the last day.",
                watched,
                self.missed,
            ),
            _per_job(
                "scheduler_deferred_periods",
                "Periods deferred by the job's catch-up budget that no node has run yet "
                "(`scheduler deferred list`); a schedule's counted under its job.",
                watched,
                self.deferred,
            ),
            _per_job(
                "scheduler_stuck_items",
                "Items claimed by an attempt that ended without finishing them "
                "(`scheduler items --stuck`).",
                watched,
                self.stuck,
            ),
            _per_job(
                "scheduler_runs_in_progress",
                "Runs claimed or running now, on any node.",
                watched,
                self.running,
            ),
        ]

    def _pool_families(self) -> list[Metric]:
        """One series per pool (pools are few, named in code): its limit in force, its
        runs running and waiting for a slot."""
        families = [
            GaugeMetricFamily(
                "scheduler_pool_limit",
                "How many runs of the pool may run at once (an operator's limit, else the code's).",
                labels=["pool"],
            ),
            GaugeMetricFamily(
                "scheduler_pool_running",
                "Runs of the pool's members running now, on any node.",
                labels=["pool"],
            ),
            GaugeMetricFamily(
                "scheduler_pool_waiting",
                "Runs of the pool's members claimed and waiting for a slot "
                "(`waiting (pool)`), on any node.",
                labels=["pool"],
            ),
        ]
        for state in self.pools:
            for family, value in zip(
                families, (state.limit, state.running, state.waiting), strict=True
            ):
                family.add_metric([state.name], value)
        return list(families)


def _per_job(
    name: str, documentation: str, jobs: Iterable[str], counts: Mapping[str, int]
) -> GaugeMetricFamily:
    """One gauge per watched job (registered, not retired), 0 for one with nothing counted."""
    family = GaugeMetricFamily(name, documentation, labels=["job"])
    for job in sorted(jobs):
        family.add_metric([job], counts.get(job, 0))
    return family


_watching: list[DatabaseCollector] = []


def watch(database: Database) -> None:
    """Serve the database-derived gauges from `database` (replacing an earlier one)."""
    unwatch()
    collector = DatabaseCollector(database)
    REGISTRY.register(collector)
    _watching.append(collector)


def unwatch() -> None:
    while _watching:
        REGISTRY.unregister(_watching.pop())
