"""Real replicas on one database: each period runs exactly once, none goes missing."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from scheduler.node.peers import Peers
from scheduler.states import RunStatus
from scheduler.store.database import open_database
from tests.acceptance.jobmods.tickers import NAMES
from tests.acceptance.processes import start_node
from tests.acceptance.records import executions, missing_seconds, run_rows

pytestmark = pytest.mark.slow


def _run_replicas(tmp_path: Path, database_url: str, count: int, seconds: float) -> None:
    execution_log = tmp_path / "executions.txt"
    nodes = [
        start_node(tmp_path, f"node{n}", database_url, "ticker", EXECUTION_LOG=str(execution_log))
        for n in range(count)
    ]
    try:
        for node in nodes:
            node.wait_for(lambda event: event.get("event") == "node_started")
        time.sleep(seconds)
        # Stop half-way between two periods: one claimed in the instant of the SIGTERM is
        # given back unstarted, for a live node to take at once (tests/integration/test_drain.py),
        # and here none is left to take it.
        time.sleep(1.5 - time.time() % 1)
    finally:
        codes = [node.stop() for node in nodes]
    assert codes == [0] * count, [node.log_path.read_text()[-2000:] for node in nodes]

    rows = run_rows(database_url, "tick")
    periods: list[datetime] = [row["period"] for row in rows]
    ran = executions(execution_log)
    assert len(rows) >= seconds - 2
    assert [p for p, times in ran.items() if times > 1] == [], "a period ran twice"
    assert missing_seconds(periods) == [], "a period between the first and last is missing"
    assert {row["status"] for row in rows} == {RunStatus.SUCCEEDED}
    assert sorted(ran) == sorted(p.isoformat() for p in periods)
    for node in nodes:
        text = node.log_path.read_text()
        assert "database is locked" not in text
        assert "Traceback" not in text


def test_three_replicas_on_postgres(tmp_path: Path, postgres_url: str) -> None:
    _run_replicas(tmp_path, postgres_url, count=3, seconds=22)


def test_two_processes_on_one_sqlite_file(tmp_path: Path, sqlite_url: str) -> None:
    _run_replicas(tmp_path, sqlite_url, count=2, seconds=15)


def test_a_hung_peers_share_is_claimed_by_the_others(tmp_path: Path, postgres_url: str) -> None:
    """A peer that heartbeats but never claims (hung, or its claims fail) owns part of
    every second's periods; the live node claims them after the hand-off, so none is
    lost and none runs twice."""
    execution_log = tmp_path / "executions.txt"
    node = start_node(tmp_path, "live", postgres_url, "tickers", EXECUTION_LOG=str(execution_log))
    try:
        node.wait_for(lambda event: event.get("event") == "node_started")
        database = open_database(postgres_url)
        try:
            with database.transaction() as connection:
                (live_id,) = connection.execute("SELECT id FROM scheduler_nodes").one()
                ghost = _a_peer_owning_some(live_id)
                # The ghost's heartbeat stays fresh for an hour: it looks alive throughout.
                connection.execute(
                    "INSERT INTO scheduler_nodes (id, name, host, pid, version, started_at,"
                    " heartbeat_at, jobs_digest) SELECT :ghost, 'ghost', 'nowhere', 1,"
                    " version, now(), now() + interval '1 hour', jobs_digest"
                    " FROM scheduler_nodes WHERE id = :live",
                    {"ghost": ghost, "live": live_id},
                )
        finally:
            database.dispose()
        known_at = datetime.now(UTC) + timedelta(seconds=3)  # the heartbeat beats every second
        time.sleep(9)
    finally:
        code = node.stop()
    assert code == 0, node.log_path.read_text()[-2000:]

    window = [known_at + timedelta(seconds=offset) for offset in range(1, 5)]
    ran = Counter(" ".join(line.split()[:2]) for line in execution_log.read_text().splitlines())
    expected = {
        f"{name} {moment.replace(microsecond=0).isoformat()}" for name in NAMES for moment in window
    }
    assert [key for key in expected if ran[key] != 1] == [], "each period once, none missing"
    handed = [event for event in node.events() if event.get("event") == "peer_share_claimed"]
    assert handed, "the ghost's share was never claimed late"
    assert all(event["periods"] <= event["of"] for event in handed)


def _a_peer_owning_some(live_id: str) -> str:
    """A made-up node id that owns at least one of the jobs beside `live_id`."""
    for index in range(100):
        ghost = f"ghost-{index}"
        shares = Peers(ghost)
        shares.update([live_id, ghost])
        if any(shares.mine(name) for name in NAMES):
            return ghost
    raise AssertionError("no ghost id owns a job")
