"""Schedules created at run time on real databases: the application's transaction,
the fire pass (each period claimed once, however many nodes pass at once), deletion,
listing, and bad input that writes nothing."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine, text

from scheduler import check, model
from scheduler.errors import ScheduleDefinitionError
from scheduler.node.registration import register
from scheduler.node.schedule_loop import plan
from scheduler.node.upcoming import jitter_delay
from scheduler.run.job_table import KEPT_S, JobTable
from scheduler.schedules import ScheduleExistsError, Schedules
from scheduler.states import RunStatus
from scheduler.store import beat, prune, writes
from scheduler.store import schedules as stored
from scheduler.store.database import Database, open_database
from tests.acceptance.jobmods.tenants import tenant_report
from tests.acceptance.tcp_proxy import Proxy
from tests.sql import rows as table_rows
from tests.waiting import wait_until

JOBS = {"tenant_report": tenant_report}


@pytest.fixture
def schedules(database: Database) -> Schedules:
    register(database, JOBS)
    return Schedules(database)


def _now(database: Database) -> datetime:
    with database.transaction() as connection:
        return stored.clock(connection)


def _pass(database: Database, node: str = "a") -> stored.Pass:
    table = JobTable(JOBS, database)
    return stored.fire(database, node, list(JOBS), lambda row, now, _: plan(table, row, now))


def _runs(database: Database) -> list[dict[str, Any]]:
    return [row for row in table_rows(database, "scheduler_runs") if row["job"].startswith("@")]


def _due_from(database: Database, start: datetime) -> None:
    """As if every schedule had been created before `start` and not fired since."""
    with database.transaction() as connection:
        connection.execute("UPDATE scheduler_schedules SET next_due_at = :start", {"start": start})


def _app_url(database: Database) -> str:
    url = database.url.with_password()
    return url.replace("postgresql://", "postgresql+psycopg://", 1)


def test_a_create_rolled_back_with_the_application_never_exists_nor_fires(
    database: Database, schedules: Schedules
) -> None:
    engine = create_engine(_app_url(database))
    start = _now(database) - timedelta(seconds=5)
    with engine.connect() as connection:
        transaction = connection.begin()
        connection.execute(text("CREATE TABLE IF NOT EXISTS app_tenants (id INTEGER PRIMARY KEY)"))
        connection.execute(text("INSERT INTO app_tenants (id) VALUES (42)"))
        schedules.create(
            "tenant-42:report",
            "tenant_report",
            every=1,
            start=start,
            args={"tenant": 42},
            connection=connection,
        )
        transaction.rollback()
    assert schedules.get("tenant-42:report") is None
    assert _pass(database).rows == []
    assert _runs(database) == []
    # The same, committed: the tenant and its schedule land together.
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE IF NOT EXISTS app_tenants (id INTEGER PRIMARY KEY)"))
        connection.execute(text("INSERT INTO app_tenants (id) VALUES (43)"))
        created = schedules.create(
            "tenant-43:report",
            "tenant_report",
            every=1,
            start=start,
            args={"tenant": 43},
            connection=connection,
        )
    engine.dispose()
    assert schedules.get("tenant-43:report") == created
    _due_from(database, start)
    done = _pass(database)
    assert [row.key for row in done.rows] == ["tenant-43:report"]
    assert {claim.job for claim in done.result.won} == {"@tenant-43:report"}


def test_a_psycopg_connection_joins_the_applications_transaction(
    postgres_url: str, postgres_schedules: Schedules
) -> None:
    schedules = postgres_schedules
    with psycopg.connect(postgres_url) as connection:
        schedules.create(
            "tenant-1:a",
            "tenant_report",
            cron="0 9 * * *",
            connection=connection,
            args={"tenant": 1},
        )
        connection.rollback()
        assert schedules.get("tenant-1:a") is None
        schedules.create(
            "tenant-1:b",
            "tenant_report",
            cron="0 9 * * *",
            connection=connection,
            args={"tenant": 1},
        )
        connection.commit()
    found = schedules.get("tenant-1:b")
    assert found is not None
    assert found.trigger.cron == "0 9 * * *"


def test_passes_at_once_claim_every_period_once_and_lose_none(
    postgres_database: Database, postgres_schedules: Schedules
) -> None:
    database, schedules = postgres_database, postgres_schedules
    # Every minute, from four minutes ago: five periods due, the next a minute away, so
    # that a slow machine's passes cannot reach it (every 5 s, a pass that took longer
    # than 5 s under load found the rows due again).
    start = _now(database).replace(microsecond=0) - timedelta(minutes=4)
    for n in range(600):
        schedules.create(
            f"tenant-{n}:tick", "tenant_report", every=60, start=start, args={"tenant": n}
        )
    _due_from(database, start)
    taken: list[list[str]] = []
    lock = threading.Lock()

    def passes(node: str) -> None:
        while True:
            done = _pass(database, node)
            with lock:
                taken.append([row.key for row in done.rows])
            if not done.rows:
                return

    threads = [threading.Thread(target=passes, args=(f"node-{n}",)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    keys = Counter(key for batch in taken for key in batch)
    # Each row was taken by one pass (SKIP LOCKED): no node waited on another's rows.
    assert set(keys) == {f"tenant-{n}:tick" for n in range(600)}
    assert set(keys.values()) == {1}
    runs = _runs(database)
    assert len({(run["job"], run["period"]) for run in runs}) == len(runs)
    per_schedule = Counter(run["job"] for run in runs)
    # start, +1 … +4 minutes: five periods each, none missing, none twice.
    assert set(per_schedule.values()) == {5}
    rows = {row["key"]: row for row in table_rows(database, "scheduler_schedules")}
    assert {row["next_due_at"] for row in rows.values()} == {start + timedelta(minutes=5)}


def test_a_schedule_being_deleted_is_passed_over_and_fires_nothing_once_deleted(
    postgres_database: Database, postgres_schedules: Schedules, postgres_url: str
) -> None:
    database, schedules = postgres_database, postgres_schedules
    start = _now(database).replace(microsecond=0) - timedelta(seconds=2)
    schedules.create("tenant-7:tick", "tenant_report", every=1, start=start, args={"tenant": 7})
    _due_from(database, start)
    with psycopg.connect(postgres_url) as connection:
        assert schedules.delete("tenant-7:tick", connection=connection)
        # The deletion holds the row until it commits: a pass meanwhile skips it.
        assert _pass(database).rows == []
        connection.commit()
    assert _pass(database).rows == []
    assert _runs(database) == []
    assert schedules.get("tenant-7:tick") is None
    assert schedules.list(deleted=True).schedules[0].key == "tenant-7:tick"


def test_a_deleted_schedule_keeps_the_periods_it_claimed_and_its_key_can_be_taken_again(
    database: Database, schedules: Schedules
) -> None:
    start = _now(database).replace(microsecond=0) - timedelta(seconds=3)
    schedules.create("t:k", "tenant_report", every=1, start=start, args={"tenant": 1})
    _due_from(database, start)
    claimed = _pass(database).result.won
    assert claimed
    assert schedules.delete("t:k")
    assert not schedules.delete("t:k")
    assert _pass(database).rows == []
    again = schedules.create("t:k", "tenant_report", every=1, start=start, args={"tenant": 2})
    _due_from(database, start)
    assert again.args == {"tenant": 2}
    # The periods the first one claimed are not claimed again under the same key.
    second = _pass(database).result.won
    assert {claim.period for claim in second}.isdisjoint({claim.period for claim in claimed})


def test_a_tenants_schedules_are_one_range_paged_in_key_order(
    database: Database, schedules: Schedules
) -> None:
    for tenant in (4, 42, 420):
        for name in ("a", "b", "c"):
            schedules.create(
                f"tenant-{tenant}:{name}",
                "tenant_report",
                cron="0 9 * * *",
                args={"tenant": tenant},
            )
    first = schedules.list("tenant-42:", limit=2)
    assert [found.key for found in first.schedules] == ["tenant-42:a", "tenant-42:b"]
    assert first.next_after == "tenant-42:b"
    rest = schedules.list("tenant-42:", limit=2, after=first.next_after)
    assert [found.key for found in rest.schedules] == ["tenant-42:c"]
    assert rest.next_after is None
    schedules.pause("tenant-4:b")
    assert [found.key for found in schedules.list(paused=True).schedules] == ["tenant-4:b"]
    assert len(schedules.list("tenant-", limit=100).schedules) == 9


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"job": "no_such_job", "cron": "0 9 * * *"}, "job"),
        ({"cron": "0 9 * * *", "args": {"when": datetime.now()}}, "args"),
        ({"cron": "0 9 * * *", "args": {"not an identifier": 1}}, "args"),
        ({"cron": "0 9 * * *", "timezone": "Nowhere/Here"}, "timezone"),
        ({"cron": "0 0 31 2 *"}, "cron"),
        ({"every": "100ms"}, "every"),
        ({"at": "2020-01-01T00:00:00Z"}, "at"),
        ({"cron": "0 9 * * *", "catchup": "sometimes"}, "catchup"),
    ],
)
def test_bad_input_names_the_schedule_and_the_field_and_writes_nothing(
    database: Database, schedules: Schedules, given: dict[str, Any], field: str
) -> None:
    arguments: dict[str, Any] = {"job": "tenant_report", "args": {"tenant": 1}, **given}
    job = arguments.pop("job")
    with pytest.raises(ScheduleDefinitionError) as raised:
        schedules.create("tenant-9:bad", job, **arguments)
    assert raised.value.field == field
    assert str(raised.value).startswith(f"schedule 'tenant-9:bad': {field}: ")
    assert table_rows(database, "scheduler_schedules") == []


def test_a_second_create_of_a_live_key_is_refused_and_changes_nothing(
    database: Database, schedules: Schedules
) -> None:
    first = schedules.create("k", "tenant_report", cron="0 9 * * *", args={"tenant": 1})
    with pytest.raises(ScheduleExistsError, match="schedule 'k': key: "):
        schedules.create("k", "tenant_report", cron="0 10 * * *", args={"tenant": 2})
    assert schedules.get("k") == first
    replaced = schedules.replace("k", "tenant_report", cron="0 10 * * *", args={"tenant": 2})
    assert (replaced.trigger.cron, replaced.args, replaced.version) == (
        "0 10 * * *",
        {"tenant": 2},
        2,
    )


@pytest.fixture
def postgres_database(postgres_url: str) -> Iterator[Database]:
    opened = open_database(postgres_url)
    yield opened
    opened.dispose()


@pytest.fixture
def postgres_schedules(postgres_database: Database) -> Schedules:
    register(postgres_database, JOBS)
    return Schedules(postgres_database)


def test_retention_forgets_a_schedule_deleted_before_the_cutoff_and_then_its_runs(
    database: Database, schedules: Schedules
) -> None:
    start = _now(database).replace(microsecond=0) - timedelta(seconds=3)
    for key in ("gone", "kept"):
        schedules.create(key, "tenant_report", every=1, start=start, args={"tenant": 1})
    _due_from(database, start)
    won = _pass(database).result.won
    for claim in won:  # every run over, as if they had run
        assert writes.start(database, claim) is model.Started.STARTED
        assert writes.finish(database, claim, RunStatus.SUCCEEDED, 1)
    assert schedules.delete("gone")
    cutoff = _now(database) + timedelta(seconds=1)
    dry = prune.prune(database, cutoff, dry_run=True)
    assert dry.schedules == 1
    done = prune.prune(database, cutoff)
    assert done.schedules == 1
    # Its runs are old runs of nothing from then on: the next prune takes them.
    prune.prune(database, cutoff)
    left = Counter(run["job"] for run in _runs(database))
    # The live schedule keeps its newest run (and success); the deleted one keeps nothing.
    assert left == {"@kept": 1}
    assert [row["key"] for row in table_rows(database, "scheduler_schedules")] == ["kept"]


def test_check_names_schedules_no_node_fires_and_a_schedules_failures(
    database: Database, schedules: Schedules
) -> None:
    report = check.gather(database)
    assert report.ok, report.findings  # a template owes nothing of its own
    start = _now(database).replace(microsecond=0) - timedelta(minutes=10)
    for tenant in range(3):
        schedules.create(f"tenant-{tenant}:r", "tenant_report", every=60, args={"tenant": tenant})
    _due_from(database, start)
    (late,) = check.gather(database).findings
    assert (late.problem, late.job, late.period) == (
        check.Problem.LATE_SCHEDULES,
        "tenant_report",
        start,
    )
    assert late.detail.startswith("3 schedule(s) created at run time due since")
    # Once fired, the late finding goes; a run of a schedule that failed for good is a
    # finding under the run's name, as any job's.
    claim = _pass(database).result.won[-1]
    assert writes.start(database, claim) is model.Started.STARTED
    assert writes.finish(database, claim, RunStatus.FAILED, 1)
    (failed,) = check.gather(database).findings
    assert (failed.problem, failed.job, failed.period) == (
        check.Problem.FAILED,
        claim.job,
        claim.period,
    )


def test_a_jittered_period_fires_once_its_delay_has_passed(
    database: Database, schedules: Schedules
) -> None:
    now = _now(database).replace(microsecond=0)
    period = now - timedelta(seconds=1)
    created = schedules.create(
        "tenant-1:jittered",
        "tenant_report",
        every=3600,
        start=period,
        jitter="5s",
        args={"tenant": 1},
    )
    assert created.jitter == timedelta(seconds=5)
    _due_from(database, period)
    job = JobTable(JOBS, database)["@tenant-1:jittered"]
    assert job.policy.jitter == timedelta(seconds=5)
    delay = jitter_delay(job, period)
    done = _pass(database)
    if period + delay > _now(database):
        # Not yet: nothing claimed, and the row waits for the delayed instant.
        assert done.result.won == []
        (row,) = table_rows(database, "scheduler_schedules")
        assert (row["next_due_at"], row["next_period"]) == (period + delay, period)
        found = schedules.get("tenant-1:jittered")
        assert found is not None
        assert found.next_due == period
        assert _pass(database).rows == []
        time.sleep(max(0.0, (period + delay - _now(database)).total_seconds()) + 0.05)
        done = _pass(database)
    assert [claim.period for claim in done.result.won] == [period]
    (row,) = table_rows(database, "scheduler_schedules")
    following = period + timedelta(hours=1)
    assert (row["next_due_at"], row["next_period"]) == (
        following + jitter_delay(job, following),
        following,
    )


def test_the_heartbeat_reads_when_the_nodes_next_schedule_is_due(
    postgres_database: Database, postgres_schedules: Schedules
) -> None:
    """An idle node's schedules loop makes no transaction of its own: the beat it makes
    anyway says when to look (and stands in for a sweep, in case a notice was lost)."""

    def read(jobs: tuple[str, ...]) -> float | None:
        return beat.beat(
            postgres_database, "node-a", alive_within=30, liveness=False, schedule_jobs=jobs
        ).schedules_in

    assert read(("tenant_report",)) is None
    start = _now(postgres_database) + timedelta(seconds=40)
    postgres_schedules.create("later", "tenant_report", at=start, args={"tenant": 1})
    soon = _now(postgres_database) + timedelta(seconds=20)
    postgres_schedules.create("soon", "tenant_report", at=soon, args={"tenant": 2})
    due_in = read(("tenant_report",))
    assert due_in is not None
    assert 15 < due_in <= 20
    assert read(("other_job",)) is None  # another node's job: not this node's to fire
    postgres_schedules.pause("soon")
    due_in = read(("tenant_report", "other_job"))
    assert due_in is not None
    assert 35 < due_in <= 40


def test_a_run_name_not_this_nodes_is_read_once_then_remembered_absent_for_a_while(
    database: Database, schedules: Schedules
) -> None:
    """Recovery asks of every stale run whether this node runs its job: a schedule of a
    job it does not run (or none) must not cost a read per stale run per sweep. A miss
    is remembered only as long as a hit, and a failed read not at all."""
    register(database, {"other_report": replace(tenant_report, name="other_report")})
    schedules.create("theirs", "other_report", every=60, args={"tenant": 1})
    reads: list[str] = []

    class Counting(JobTable):
        def _read(self, key: str) -> stored.ScheduleRow | None:
            reads.append(key)
            return super()._read(key)

    table = Counting(JOBS, database)
    for _ in range(3):
        assert "@theirs" not in table
        assert "@missing" not in table
    assert reads == ["theirs", "missing"]
    # Created meanwhile: found once the miss has aged out (as a changed row is re-read).
    schedules.create("missing", "tenant_report", every=60, args={"tenant": 2})
    table._absent.clear()  # aged out: KEPT_S is the same bound as for a hit
    assert "@missing" in table
    assert table["@missing"].args == {"tenant": 2}


def test_a_failed_read_of_a_schedule_is_not_remembered_as_absent(
    postgres_url: str, postgres_schedules: Schedules
) -> None:
    postgres_schedules.create("mine", "tenant_report", every=60, args={"tenant": 1})
    proxy = Proxy(target_port=5432)
    proxy.start()
    away = open_database(proxy.url(postgres_url))
    try:
        table = JobTable(JOBS, away)
        proxy.cut()  # the database goes away: the read fails
        assert "@mine" not in table
        proxy.start()  # back: the same name is read again at once, and found
        wait_until(lambda: "@mine" in table, timeout=KEPT_S / 2)
    finally:
        proxy.cut()
        away.dispose()
