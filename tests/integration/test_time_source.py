"""The one seam of `scheduler.testing`: a time source held by the database handle and
given to the node's clock. By default the real clocks; a virtual one reaches SQLite's
`:now`, its leases, and the node's clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from scheduler.instants import SYSTEM_TIME
from scheduler.model import Due
from scheduler.node.clock import Clock
from scheduler.store import claims, queries
from scheduler.store.database import Database, open_database
from scheduler.testing.clock import VirtualClock
from scheduler.testing.database import fresh_database


def test_by_default_every_clock_is_the_real_one(sqlite_url: str) -> None:
    database = open_database(sqlite_url)
    try:
        assert database.time_source is SYSTEM_TIME
        before = datetime.now(UTC)
        assert before <= database.read_clock() <= datetime.now(UTC)
        assert abs(Clock().now() - datetime.now(UTC)) < timedelta(seconds=1)
    finally:
        database.dispose()


def test_a_virtual_clock_is_sqlites_now_its_leases_and_the_nodes_clock(tmp_path: Path) -> None:
    clock = VirtualClock("2030-05-01T12:00Z")
    database: Database
    database, _ = fresh_database(tmp_path, clock)
    try:
        assert database.read_clock() == clock.now
        period = datetime(2030, 5, 1, 12, 0, tzinfo=UTC)
        (won,) = claims.claim(database, [Due("sync", period, 30)], "node-a").won
        row = queries.run_at(database, "sync", period)
        assert row is not None
        assert row.claimed_at == clock.now
        assert row.lease_expires_at == clock.now + timedelta(seconds=30)
        # A period a minute ahead of the virtual clock is early, whatever the host's.
        later = claims.claim(database, [Due("sync", period + timedelta(minutes=1), 30)], "a")
        assert (later.won, len(later.early)) == ([], 1)
        node_clock = Clock(database.time_source)
        clock.set(clock.now + timedelta(hours=3))
        assert node_clock.now() == datetime(2030, 5, 1, 15, 0, tzinfo=UTC)
        assert won.attempt == 1
    finally:
        database.dispose()
