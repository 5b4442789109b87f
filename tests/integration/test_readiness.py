"""/readyz's verdicts against real databases: reachable, schema current, heartbeat fresh."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from scheduler.http import Readiness
from scheduler.store import migrate
from scheduler.store.database import Database, open_database

OK = {"database": "ok", "schema": "ok", "heartbeat": "ok"}


@dataclass
class Beats:
    """Stands in for the heartbeat thread: when it last wrote a heartbeat, and how often."""

    last_beat: float | None = None
    interval: float = 1.0


def test_a_healthy_node_is_ready(database: Database) -> None:
    beats = Beats()
    readiness = Readiness(database, beats)
    assert readiness.checks() == OK
    beats.last_beat = time.monotonic()
    assert readiness.checks() == OK


def test_a_heartbeat_older_than_three_intervals_is_stale(database: Database) -> None:
    readiness = Readiness(database, Beats(last_beat=time.monotonic() - 3.5))
    verdict = readiness.checks()["heartbeat"]
    assert verdict.startswith("no heartbeat written for 3.5s"), verdict
    assert verdict.endswith("(limit 3s)")


def test_an_outdated_schema_is_unready(database: Database) -> None:
    migrate.downgrade(database, "0001")
    checks = Readiness(database, Beats(last_beat=time.monotonic())).checks()
    assert checks["database"] == "ok"
    assert "run `scheduler migrate`" in checks["schema"]


def test_a_sqlite_file_moved_away_is_unready(sqlite_url: str) -> None:
    database = open_database(sqlite_url)
    try:
        readiness = Readiness(database, Beats(last_beat=time.monotonic()))
        assert readiness.checks() == OK
        path = Path(sqlite_url.removeprefix("sqlite:///"))
        path.rename(path.with_suffix(".moved"))
        checks = readiness.checks()
        assert checks["database"] == f"database file {str(path)!r} no longer exists"
        assert checks["schema"] == "not checked: no database"
    finally:
        database.dispose()
