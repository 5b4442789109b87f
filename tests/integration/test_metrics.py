"""The metric functions and the database-derived gauges, read back through the exposition."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from scheduler import metrics
from scheduler.node.registration import register
from scheduler.policy import Pool as PoolLimits
from scheduler.registry import job
from scheduler.schedules import Schedules
from scheduler.states import Origin
from scheduler.store import concurrency
from scheduler.store.database import Database, parse_database_url
from scheduler.store.pool import Pool
from tests.integration import seed

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples() -> Samples:
    text = generate_latest(metrics.REGISTRY).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@dataclass(frozen=True)
class Claimed:
    job: str
    origin: Origin = Origin.SCHEDULE


@pytest.fixture
def watched(database: Database) -> Iterator[Database]:
    metrics.watch(database)
    yield database
    metrics.unwatch()


@pytest.fixture
def per_job() -> Iterator[None]:
    metrics.per_job_histograms(True)
    yield
    metrics.per_job_histograms(False)


@pytest.mark.usefixtures("per_job")
def test_what_a_node_does_is_counted() -> None:
    before = samples()
    metrics.record_claims(5, [Claimed("m-a"), Claimed("m-a", Origin.CATCHUP)], [Claimed("m-b")])
    metrics.record_start("m-a", datetime.now(UTC) - timedelta(seconds=2))
    metrics.record_finish("m-a", "succeeded", 1500)
    metrics.record_finish("m-a", "abandoned", None)
    metrics.record_lease_lost("m-a")
    after = samples()

    def grew(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    assert grew("scheduler_claims_total", result="won") == 3
    assert grew("scheduler_claims_total", result="lost") == 2
    assert grew("scheduler_catchup_claims_total", job="m-a") == 1
    assert grew("scheduler_runs_total", job="m-b", status="skipped") == 1
    assert grew("scheduler_runs_total", job="m-a", status="succeeded") == 1
    assert grew("scheduler_runs_total", job="m-a", status="abandoned") == 1
    assert grew("scheduler_run_duration_seconds_count", job="m-a") == 1
    assert grew("scheduler_run_duration_seconds_sum", job="m-a") == pytest.approx(1.5)
    assert 2 <= grew("scheduler_run_start_lag_seconds_sum", job="m-a") < 3
    assert grew("scheduler_leases_lost_total", job="m-a") == 1


def test_overdue_and_last_success_gauges_read_the_database(watched: Database) -> None:
    new_year = datetime(datetime.now(UTC).year, 1, 1, tzinfo=UTC)
    long_ago = new_year - timedelta(days=400)
    seed.add_job(watched, "late", "0 0 1 1 *", first_seen=long_ago)
    seed.add_job(watched, "fine", "0 0 1 1 *", first_seen=long_ago)
    finished = new_year + timedelta(seconds=3, microseconds=500)
    seed.add_run(watched, "fine", new_year, "succeeded", finished_at=finished)
    seed.add_run(watched, "late", new_year, "failed", finished_at=finished)
    found = samples()
    assert found[("scheduler_overdue_jobs", ())] == 1
    assert found[("scheduler_last_success_timestamp_seconds", (("job", "fine"),))] == (
        pytest.approx(finished.timestamp())
    )
    assert ("scheduler_last_success_timestamp_seconds", (("job", "late"),)) not in found
    # A schedule's runs (`@key`, a million of them perhaps) are not read for this gauge.
    seed.add_run(watched, "@tenant-1", new_year, "succeeded", finished_at=finished)
    found = samples()
    assert ("scheduler_last_success_timestamp_seconds", (("job", "@schedules"),)) not in found
    assert found[("scheduler_last_success_timestamp_seconds", (("job", "fine"),))] == (
        pytest.approx(finished.timestamp())
    )


def test_the_gauges_are_left_out_while_the_database_is_away() -> None:
    url = parse_database_url("postgresql://nobody@127.0.0.1:1/none")
    pool: Pool[psycopg.Connection[Any]] = Pool(
        lambda: psycopg.connect(url.conninfo, connect_timeout=1),
        lambda raw: raw.close(),
        kept=1,
        most=1,
    )
    database = Database(url, pool)
    metrics.watch(database)
    try:
        found = samples()
    finally:
        metrics.unwatch()
        database.dispose()
    assert ("scheduler_overdue_jobs", ()) not in found
    assert ("process_cpu_seconds_total", ()) in found


def test_by_default_the_histograms_are_not_per_job() -> None:
    before = samples()
    metrics.record_finish("m-c", "succeeded", 250)
    metrics.record_start("m-c", datetime.now(UTC))
    after = samples()
    assert ("scheduler_run_duration_seconds_count", (("job", "m-c"),)) not in after
    key = ("scheduler_run_duration_seconds_count", ())
    assert after[key] - before.get(key, 0) == 1
    assert after[("scheduler_runs_total", (("job", "m-c"), ("status", "succeeded")))] >= 1


def test_per_job_gauges_start_at_zero_for_every_registered_job(watched: Database) -> None:
    now = seed.now()
    for name in ("quiet", "troubled"):
        seed.add_job(watched, name, "0 0 1 1 *", first_seen=now)
    period = datetime(2026, 1, 1, tzinfo=UTC)
    ended = seed.add_run(watched, "troubled", period, "failed", finished_at=now)
    seed.add_item(watched, "troubled", "email:1", period, ended)
    seed.add_run(watched, "troubled", period + timedelta(hours=1), "missed", claimed_at=now)
    seed.add_run(watched, "troubled", period + timedelta(hours=2), "running")
    seed.add_run(
        watched,
        "troubled",
        period - timedelta(days=3),
        "missed",
        claimed_at=now - timedelta(days=3),
    )
    for hours in (3, 4):
        seed.add_run(
            watched,
            "troubled",
            period + timedelta(hours=hours),
            "deferred",
            reason="budget",
            finished_at=now,
            origin="catchup",
        )
    found = samples()
    for name, expected in (("quiet", (0, 0, 0, 0)), ("troubled", (1, 1, 1, 2))):
        labels = (("job", name),)
        assert (
            found[("scheduler_missed_periods", labels)],
            found[("scheduler_stuck_items", labels)],
            found[("scheduler_runs_in_progress", labels)],
            found[("scheduler_deferred_periods", labels)],
        ) == expected, name
    (build,) = [labels for name, labels in found if name == "scheduler_build_info"]
    assert dict(build)["version"] == "0.1.0"


def test_a_schedules_deferred_periods_count_under_its_template(watched: Database) -> None:
    """A schedule created at run time (`@<key>`) has no series of its own: its periods
    deferred by the budget (waiting or approved) count under the job its row names."""
    template = job(cron=None, name="tenant_budgeted", catchup_budget="3/1h")(lambda tenant: None)
    register(watched, {"tenant_budgeted": template})
    schedules = Schedules(watched)
    for key in ("t1", "t2"):
        schedules.create(key, "tenant_budgeted", every=60, args={"tenant": key})
    now = seed.now()
    period = datetime(2026, 1, 1, tzinfo=UTC)
    for job_name, minutes, reason in (
        ("@t1", 0, "budget"),
        ("@t1", 1, "budget"),
        ("@t1", 2, "approved"),
        ("@t1", 3, "paced"),  # runs by itself at the budget's pace: not counted
        ("@t2", 0, "budget"),
        ("@gone", 0, "budget"),  # no schedule row left: no template to count it under
    ):
        seed.add_run(
            watched,
            job_name,
            period + timedelta(minutes=minutes),
            "deferred",
            reason=reason,
            finished_at=now,
            origin="catchup",
        )
    found = samples()
    assert found[("scheduler_deferred_periods", (("job", "tenant_budgeted"),))] == 4
    labels = {dict(labels).get("job") for name, labels in found if "deferred" in name}
    assert labels == {"tenant_budgeted"}, "never a series per schedule"


def test_each_pool_has_its_limit_running_and_waiting_gauges(watched: Database) -> None:
    concurrency.declare(watched, [PoolLimits("reports", limit=2), PoolLimits("quiet", limit=5)])
    now = seed.now()
    period = datetime(2026, 1, 1, tzinfo=UTC)
    for hours, status, reason in (
        (0, "running", None),
        (1, "claimed", "pool"),
        (2, "claimed", "pool"),
    ):
        seed.add_run(
            watched,
            "report",
            period + timedelta(hours=hours),
            status,
            reason=reason,
            pool="reports",
            lease_expires_at=now + timedelta(minutes=5),
        )
    concurrency.change(watched, "reports", limit=3, per_key=None, by="ops")
    found = samples()
    for pool, expected in (("reports", (3, 1, 2)), ("quiet", (5, 0, 0))):
        labels = (("pool", pool),)
        assert (
            found[("scheduler_pool_limit", labels)],
            found[("scheduler_pool_running", labels)],
            found[("scheduler_pool_waiting", labels)],
        ) == expected, pool
