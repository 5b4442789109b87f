"""The runs table is indexed by what is live (migration 0011): a start touches no index,
and every lookup of live rows, or of runs by status, is still served by an index.

- A start changes `status` (claimed to running) and its start columns, none of them in
  an index: on PostgreSQL it is a HOT update, its new row version on the same page.
- A start leaves the lease as the claim or the last renewal set it (a changed lease
  would touch the lease index); the heartbeat's renewal pushes it forward.
- The recovery sweep, renewals, overlap checks, the beat's next deadline and the views
  by status read through an index, not the whole table, on a table of long history.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from scheduler.model import Due, Started, StartRequest
from scheduler.states import ACTIVE_STATUSES, RunStatus
from scheduler.store import beat, claims, nodes, overview, queries, renewals, takeover, writes
from scheduler.store.connection import Connection
from scheduler.store.database import Database, open_database
from tests.waiting import wait_until

# Due a minute ago: a claim takes only periods that have come.
PERIOD = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
HISTORY_JOBS = 200
HISTORY_PERIODS = 100  # 20,000 ended rows


def _lease_of(database: Database, run_id: str) -> tuple[datetime, str, datetime | None]:
    with database.transaction() as connection:
        row = connection.execute(
            "SELECT lease_expires_at, status, started_at FROM scheduler_runs WHERE id = :id",
            {"id": run_id},
        ).one()
    return row.lease_expires_at, row.status, row.started_at


def test_a_start_leaves_the_lease_and_a_renewal_moves_it(database: Database) -> None:
    (claim,) = claims.claim(database, [Due("report", PERIOD, 30)], "node-a").won
    lease, status, _ = _lease_of(database, claim.id)
    assert status == RunStatus.CLAIMED

    assert writes.start(database, claim, in_turn=True) is Started.STARTED
    after, status, started_at = _lease_of(database, claim.id)
    assert (status, after) == (RunStatus.RUNNING, lease)
    assert started_at is not None
    # Tried again after a lost reply, the start still says started, and still leaves it.
    assert writes.start(database, claim, in_turn=True) is Started.STARTED
    assert _lease_of(database, claim.id)[0] == lease

    (held,) = renewals.renew_leases(database, "node-a")
    assert held.id == claim.id
    assert _lease_of(database, claim.id)[0] > lease


@pytest.mark.postgres
def test_a_start_is_a_hot_update(postgres_url: str) -> None:
    database = open_database(postgres_url)
    try:
        due = [Due(f"job-{index}", PERIOD, 30) for index in range(40)]
        won = claims.claim(database, due, "node-a").won
        # The starter's batch: in turn, in one guarded round trip.
        _, started = writes.record(database, [], [StartRequest(claim, True) for claim in won])
        assert started == [Started.STARTED] * 40
    finally:
        database.dispose()  # a backend's statistics are sent when it ends

    def updates() -> tuple[int, int]:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            row = admin.execute(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
                " WHERE relname = 'scheduler_runs'"
            ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    wait_until(lambda: updates()[0] >= 40, timeout=10)
    updated, hot = updates()
    # Half of each page is left free; the last row of a full one may find no room.
    assert updated == 40
    assert hot >= 36, f"{hot} of {updated} starts were HOT updates"


# -- every lookup of live rows through an index --------------------------------------


@pytest.fixture
def long_history(database: Database) -> Database:
    """20,000 ended runs (a few failed or missed), a handful live, statistics fresh."""
    first = PERIOD - timedelta(days=HISTORY_PERIODS + 1)
    with database.transaction() as connection:
        if database.arrays:
            connection.execute(
                f"""
                INSERT INTO scheduler_runs (id, job, period, status, origin, attempt, holder,
                    lease_seconds, claimed_at, started_at, finished_at, duration_ms)
                SELECT md5(j::text || '-' || p::text), 'history-' || j,
                       CAST(:first AS timestamptz) + p * interval '1 day',
                       CASE WHEN p % 50 = 1 THEN 'failed' WHEN p % 50 = 2 THEN 'missed'
                            ELSE 'succeeded' END,
                       'schedule', 1, 'node-a', 30,
                       CAST(:first AS timestamptz) + p * interval '1 day',
                       CAST(:first AS timestamptz) + p * interval '1 day',
                       CAST(:first AS timestamptz) + p * interval '1 day', 5
                FROM generate_series(1, {HISTORY_JOBS}) AS j,
                     generate_series(1, {HISTORY_PERIODS}) AS p
                """,
                {"first": first},
            )
        else:
            rows = [
                {
                    "id": f"h{job}-{day}",
                    "job": f"history-{job}",
                    "period": first + timedelta(days=day),
                    "status": "failed"
                    if day % 50 == 1
                    else "missed"
                    if day % 50 == 2
                    else "succeeded",
                }
                for job in range(HISTORY_JOBS)
                for day in range(HISTORY_PERIODS)
            ]
            connection.execute_many(
                "INSERT INTO scheduler_runs (id, job, period, status, origin, attempt, holder,"
                " lease_seconds, claimed_at, started_at, finished_at, duration_ms)"
                " VALUES (:id, :job, :period, :status, 'schedule', 1, 'node-a', 30,"
                " :period, :period, :period, 5)",
                rows,
            )
    claims.claim(database, [Due(f"history-{job}", PERIOD, 30) for job in range(5)], "node-a")
    with database.autocommit() as connection:
        connection.execute("ANALYZE scheduler_runs")
    return database


Call = Callable[[Database], object]

LOOKUPS: dict[str, Call] = {
    "renewal": lambda db: renewals.renew_leases(db, "node-a"),
    "recovery sweep": lambda db: takeover.find_stale(db, ["history-1"], 100),
    "next recovery, every job": lambda db: takeover.seconds_until_recovery(db, None),
    "next recovery, one job": lambda db: takeover.seconds_until_recovery(db, ["history-1"]),
    "heartbeat": lambda db: beat.beat(db, "node-a", alive_within=30, liveness=False),
    "claim, overlap checked": lambda db: claims.claim(
        db, [Due("history-9", PERIOD, 30, start=True)], "node-b"
    ),
    "start in turn": lambda db: writes.record(
        db,
        [],
        [
            StartRequest(claim, True)
            for claim in claims.claim(db, [Due("history-8", PERIOD, 30)], "node-b").won
        ],
    ),
    "runs of a node found gone": lambda db: nodes.release_runs_of(
        db, [nodes.Watched("node-a", 7)], 8
    ),
    "runs of a node superseded": lambda db: nodes.supersede(db, ["node-z"]),
    "runs in progress": overview.in_progress,
    "runs still running past their timeout": queries.lingering,
    "runs, failed": lambda db: queries.list_runs(db, statuses=["failed"]),
    "runs, running or missed": lambda db: queries.list_runs(db, statuses=["running", "missed"]),
    "problems recorded lately": lambda db: queries.recorded_since(
        db, ["failed", "missed"], PERIOD - timedelta(days=1)
    ),
    "missed, by job": lambda db: queries.count_by_job(
        db, [RunStatus.MISSED], recorded_since=PERIOD - timedelta(days=1)
    ),
    "running, by job": lambda db: queries.count_by_job(db, ACTIVE_STATUSES),
}


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Mapping[str, Any] | None]]:
    """Every statement the store sends, with its parameters, to be explained after."""
    statements: list[tuple[str, Mapping[str, Any] | None]] = []
    execute, pipeline = Connection.execute, Connection.pipeline

    def recorded(self: Connection, sql: str, parameters: Mapping[str, Any] | None = None) -> Any:
        statements.append((sql, parameters))
        return execute(self, sql, parameters)

    def recorded_pipeline(
        self: Connection, batch: Sequence[tuple[str, Mapping[str, Any] | None]]
    ) -> Any:
        statements.extend(batch)
        return pipeline(self, batch)

    monkeypatch.setattr(Connection, "execute", recorded)
    monkeypatch.setattr(Connection, "pipeline", recorded_pipeline)
    return statements


def _runs_table_scans(connection: Connection, sql: str, parameters: Any) -> list[str]:
    """The plan's full reads of the runs table (by any alias), as readable lines."""
    if connection.is_postgres:
        (plan,) = connection.execute(f"EXPLAIN (FORMAT JSON) {sql}", parameters).one()
        found: list[str] = []

        def walk(node: dict[str, Any]) -> None:
            if (
                node.get("Node Type") == "Seq Scan"
                and node.get("Relation Name") == "scheduler_runs"
            ):
                found.append(f"Seq Scan on scheduler_runs {node.get('Alias', '')}")
            for child in node.get("Plans", []):
                walk(child)

        walk((plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"])
        return found
    details = [row[-1] for row in connection.execute(f"EXPLAIN QUERY PLAN {sql}", parameters)]
    aliases = ("scheduler_runs", "run", "other", "older", "recent")
    return [
        detail
        for detail in details
        if detail.startswith("SCAN ") and detail.split()[1] in aliases and "INDEX" not in detail
    ]


@pytest.mark.parametrize("lookup", list(LOOKUPS))
def test_live_rows_and_statuses_are_found_through_an_index(
    long_history: Database, sent: list[tuple[str, Any]], lookup: str
) -> None:
    answer = LOOKUPS[lookup](long_history)
    if lookup == "runs of a node found gone" and not long_history.sessions:
        # A node is found gone by its session lock, which SQLite has not: nothing sent.
        assert (answer, sent) == (0, [])
        return
    read = [(sql, parameters) for sql, parameters in sent if "scheduler_runs" in sql]
    assert read, f"{lookup}: no statement read the runs table"
    scans = []
    with long_history.transaction() as connection:
        for sql, parameters in read:
            if sql.lstrip().upper().startswith(("SELECT", "WITH", "UPDATE", "INSERT", "DELETE")):
                scans += [
                    f"{scan}\n  in {sql.strip()[:300]}"
                    for scan in _runs_table_scans(connection, sql, parameters)
                ]
    assert not scans, f"{lookup} reads the whole runs table:\n" + "\n".join(scans)
