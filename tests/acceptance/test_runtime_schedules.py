"""Schedules created at run time, with real nodes: every live node sees a change within
a second, each period runs once across the nodes, a schedule created in a rolled-back
transaction never fires, and a deleted (or paused) schedule fires nothing after its
change commits."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from scheduler.schedules import Schedules, Spec
from scheduler.store import schedules as stored
from scheduler.store.database import open_database
from tests.acceptance.celery_workers import REDIS_URL, celery_env, start_worker
from tests.acceptance.processes import Node, start_node, when
from tests.sql import rows

pytestmark = pytest.mark.slow

TENANTS = 12


def _executions(path: Path) -> list[dict[str, Any]]:
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines]


def _clock(url: str) -> datetime:
    database = open_database(url)
    try:
        with database.transaction() as connection:
            return stored.clock(connection)
    finally:
        database.dispose()


def _started(nodes: list[Node]) -> dict[tuple[str, str], float]:
    """When each period's run started, by the node's log: (job, period) → epoch seconds."""
    found: dict[tuple[str, str], float] = {}
    for node in nodes:
        for event in node.events():
            if event.get("event") == "run_started" and str(event.get("job", "")).startswith("@"):
                found[(event["job"], event["period"])] = when(event)
    return found


def _fleet(tmp_path: Path, database_url: str, count: int) -> tuple[list[Node], Path]:
    log = tmp_path / "executions.jsonl"
    nodes = [
        start_node(tmp_path, f"node{n}", database_url, "tenants", EXECUTION_LOG=str(log))
        for n in range(count)
    ]
    for node in nodes:
        node.wait_for(lambda event: event.get("event") == "node_started")
    return nodes, log


def _app_url(url: str) -> str:
    return url.replace("postgresql://", "postgresql+psycopg://", 1)


def _check_fleet(tmp_path: Path, database_url: str, count: int) -> None:
    nodes, log = _fleet(tmp_path, database_url, count)
    schedules = Schedules(database_url)
    try:
        for tenant in range(TENANTS):
            schedules.create(
                f"tenant-{tenant}:tick", "tenant_report", every=1, args={"tenant": tenant}
            )
        # One created in the application's transaction, rolled back: it never fires.
        engine = create_engine(_app_url(database_url))
        with engine.connect() as connection:
            transaction = connection.begin()
            connection.execute(text("CREATE TABLE IF NOT EXISTS app_tenants (id INTEGER)"))
            connection.execute(text("INSERT INTO app_tenants VALUES (99)"))
            schedules.create(
                "tenant-99:tick",
                "tenant_report",
                every=1,
                args={"tenant": 99},
                connection=connection,
            )
            transaction.rollback()
        engine.dispose()
        time.sleep(4)
        changed = schedules.change("tenant-0:tick", args={"tenant": 0, "note": "changed"})
        paused = schedules.pause("tenant-1:tick")
        assert schedules.delete("tenant-2:tick")
        deleted_at = _clock(database_url)
        time.sleep(4)
        resumed = schedules.resume("tenant-1:tick")
        time.sleep(3)
    finally:
        schedules.close()
        codes = [node.stop() for node in nodes]
    assert codes == [0] * count, [node.log_path.read_text()[-2000:] for node in nodes]
    for node in nodes:
        assert "Traceback" not in node.log_path.read_text()

    ran = _executions(log)
    once = Counter((line["schedule"], line["period"]) for line in ran)
    assert [pair for pair, times in once.items() if times > 1] == [], "a period ran twice"
    assert "tenant-99:tick" not in {line["schedule"] for line in ran}
    by_schedule: dict[str, list[datetime]] = {}
    for line in ran:
        by_schedule.setdefault(line["schedule"], []).append(datetime.fromisoformat(line["period"]))
    for tenant in range(3, TENANTS):
        periods = sorted(by_schedule[f"tenant-{tenant}:tick"])
        span = int((periods[-1] - periods[0]).total_seconds()) + 1
        assert len(periods) == span, f"tenant-{tenant}: a period between first and last is missing"
        assert len(periods) >= 9
    # A change reaches the nodes within a second: every period from a second after it
    # carries the new arguments.
    after_change = [
        line
        for line in ran
        if line["schedule"] == "tenant-0:tick"
        and datetime.fromisoformat(line["period"]) >= changed.updated_at + timedelta(seconds=1)
    ]
    assert after_change
    assert {line["note"] for line in after_change} == {"changed"}
    # Nothing of a deleted schedule runs after its deletion; nothing of a paused one
    # between its pause and resume; it fires again within a second of the resume.
    deleted = [
        datetime.fromisoformat(line["period"])
        for line in ran
        if line["schedule"] == "tenant-2:tick"
    ]
    assert deleted
    assert max(deleted) <= deleted_at
    tenant1 = sorted(by_schedule["tenant-1:tick"])
    assert paused.updated_at is not None
    assert not [p for p in tenant1 if paused.updated_at < p <= resumed.updated_at]
    assert next(p for p in tenant1 if p > resumed.updated_at) <= resumed.updated_at + timedelta(
        seconds=1
    )
    # Each period started within a second of its instant: the fleet heard of each new
    # schedule at once.
    started = _started(nodes)
    late = {
        key: round(at - datetime.fromisoformat(key[1]).timestamp(), 3)
        for key, at in started.items()
        if at - datetime.fromisoformat(key[1]).timestamp() > 1.0
    }
    assert late == {}
    if count > 1:
        assert len({line["node"] for line in ran}) == count, "every node fired some"


def test_two_nodes_on_postgres(tmp_path: Path, postgres_url: str) -> None:
    _check_fleet(tmp_path, postgres_url, count=2)


def test_two_nodes_on_one_sqlite_file(tmp_path: Path, sqlite_url: str) -> None:
    _check_fleet(tmp_path, sqlite_url, count=2)


def test_a_schedules_failure_reaches_its_jobs_hook_once(tmp_path: Path, postgres_url: str) -> None:
    heard_log = tmp_path / "heard.jsonl"
    nodes = [
        start_node(
            tmp_path,
            f"node{n}",
            postgres_url,
            "tenants",
            EXECUTION_LOG=str(tmp_path / "x.jsonl"),
            HEARD_LOG=str(heard_log),
        )
        for n in range(2)
    ]
    try:
        for node in nodes:
            node.wait_for(lambda event: event.get("event") == "node_started")
        with Schedules(postgres_url) as schedules:
            at = _clock(postgres_url) + timedelta(seconds=1)
            schedules.create("tenant-5:flaky", "tenant_flaky", at=at, args={"fail": True})
            schedules.create("tenant-6:flaky", "tenant_flaky", at=at, args={"fail": False})
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not heard_log.exists():
            time.sleep(0.2)
        time.sleep(2)
    finally:
        codes = [node.stop() for node in nodes]
    assert codes == [0, 0]
    heard = [json.loads(line) for line in heard_log.read_text().splitlines()]
    assert [(line["kind"], line["job"]) for line in heard] == [("failed", "@tenant-5:flaky")]


def test_a_schedules_periods_run_once_on_celery_workers(tmp_path: Path, postgres_url: str) -> None:
    # The module's every-second job fires once a year here: only the schedules run.
    env = celery_env(tmp_path, postgres_url, f"{REDIS_URL}/13") | {"CELERY_TEST_CRON": "0 0 1 1 *"}
    worker = start_worker(tmp_path, "w1", queue=env["CELERY_TEST_QUEUE"], env=env)
    node = start_node(tmp_path, "node1", postgres_url, "on_celery", **env)
    try:
        node.wait_for(lambda event: event.get("event") == "node_started")
        with Schedules(postgres_url) as schedules:
            for tenant in (1, 2):
                schedules.create(
                    f"tenant-{tenant}:remote", "remote_tenant", every=1, args={"tenant": tenant}
                )
        time.sleep(6)
    finally:
        assert node.stop() == 0, node.log_path.read_text()[-3000:]
        time.sleep(1)
        worker.stop()
    lines = [line.split() for line in Path(env["EXECUTION_LOG"]).read_text().splitlines()]
    ran = Counter((schedule, period) for period, _, _, schedule, _ in lines)
    assert [pair for pair, times in ran.items() if times > 1] == []
    assert {(schedule, tenant) for _, _, _, schedule, tenant in lines} == {
        ("tenant-1:remote", "1"),
        ("tenant-2:remote", "2"),
    }
    assert all(holder.startswith("w1@") for _, holder, *_ in lines)
    for tenant in (1, 2):
        periods = sorted(
            datetime.fromisoformat(period)
            for period, _, _, schedule, _ in lines
            if schedule == f"tenant-{tenant}:remote"
        )
        assert len(periods) >= 4
        assert len(periods) == int((periods[-1] - periods[0]).total_seconds()) + 1


def test_a_schedules_run_whose_node_is_killed_is_retaken_by_another(
    tmp_path: Path, postgres_url: str
) -> None:
    nodes, log = _fleet(tmp_path, postgres_url, 2)
    try:
        time.sleep(3)  # every node knows its peers: a death is seen at once
        with Schedules(postgres_url) as schedules:
            at = _clock(postgres_url) + timedelta(seconds=1)
            schedules.create("tenant-8:slow", "tenant_slow", at=at, args={"tenant": 8})
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not _executions(log):
            time.sleep(0.1)
        (first,) = _executions(log)
        holder = next(
            node
            for node in nodes
            if any(
                event.get("event") == "run_started" and event.get("job") == "@tenant-8:slow"
                for event in node.events()
            )
        )
        assert first["attempt"] == 1
        holder.process.send_signal(signal.SIGKILL)
        holder.process.wait()
        killed_at = time.monotonic()
        while time.monotonic() < killed_at + 20 and len(_executions(log)) < 2:
            time.sleep(0.1)
        retaken_after = time.monotonic() - killed_at
        time.sleep(1)
    finally:
        for node in nodes:
            if node.process.poll() is None:
                node.stop()
    ran = _executions(log)
    assert [line["attempt"] for line in ran] == [1, 2]
    assert ran[1]["node"] != ran[0]["node"]
    # Well within the 6 s lease: the fast path (the dead node's lock), as for any job.
    assert retaken_after < 4.5, retaken_after
    (row,) = [row for row in _run_rows(postgres_url) if row["job"] == "@tenant-8:slow"]
    assert (row["status"], row["attempt"]) == ("succeeded", 2)


def _run_rows(url: str) -> list[dict[str, Any]]:
    database = open_database(url)
    try:
        return rows(database, "scheduler_runs")
    finally:
        database.dispose()


PEAK = 3000


def test_a_peak_of_schedules_due_at_one_instant_runs_each_once(
    tmp_path: Path, postgres_url: str
) -> None:
    """The 09:00 peak, small: 3,000 schedules due at one instant on three nodes. Every
    period runs once, none is missed, and the fleet shares them (bench n has 100,000)."""
    nodes, log = _fleet(tmp_path, postgres_url, 3)
    try:
        with Schedules(postgres_url) as schedules:
            at = _clock(postgres_url).replace(microsecond=0) + timedelta(seconds=8)
            schedules.create_many(
                Spec(f"tenant-{n}:peak", "tenant_report", at=at, args={"tenant": n})
                for n in range(PEAK)
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(_executions(log)) < PEAK:
            time.sleep(0.5)
        time.sleep(1)
    finally:
        codes = [node.stop() for node in nodes]
    assert codes == [0, 0, 0], [node.log_path.read_text()[-2000:] for node in nodes]
    ran = _executions(log)
    once = Counter(line["schedule"] for line in ran)
    assert len(once) == PEAK, f"{PEAK - len(once)} periods never ran"
    assert set(once.values()) == {1}, "a period ran twice"
    assert {line["period"] for line in ran} == {at.isoformat()}
    shares = Counter(line["node"] for line in ran)
    assert len(shares) == 3, shares
    started = _started(nodes)
    last = max(started.values()) - at.timestamp()
    assert last < 20, f"the last period started {last:.1f}s after the instant"
