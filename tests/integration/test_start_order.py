"""A job whose overlap is not `allow` runs one period at a time across the cluster, even
when a period is inserted or retaken while another period's start is in flight.

PostgreSQL only: SQLite takes the whole database's write lock for every transaction, so
no two writes are ever in flight there."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from scheduler.model import Due, Entry, Started
from scheduler.states import Origin, RunStatus
from scheduler.store import claims, queries, writes
from scheduler.store import periods as period_rows
from scheduler.store.database import open_database

PERIOD = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NEXT = PERIOD + timedelta(seconds=1)


def _slow_start_of(postgres_url: str, period: datetime, seconds: float) -> None:
    """Hold the start of `period` inside its transaction for a while, after its row is
    updated and before it commits: the window another writer could slip through."""
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(
            f"""
            CREATE FUNCTION linger() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN PERFORM pg_sleep({seconds}); RETURN NEW; END $$;
            CREATE TRIGGER linger AFTER UPDATE ON scheduler_runs FOR EACH ROW
            WHEN (NEW.status = 'running' AND NEW.period = '{period.isoformat()}')
            EXECUTE FUNCTION linger();
            """
        )


@pytest.mark.postgres
def test_a_period_inserted_while_another_starts_waits_for_it(postgres_url: str) -> None:
    database = open_database(postgres_url)
    try:
        (newer,) = claims.claim(database, [Due("sync", NEXT, 30)], "node-b").won
        _slow_start_of(postgres_url, NEXT, 1.5)
        results: dict[str, Started] = {}
        starting = threading.Thread(
            target=lambda: results.update(newer=writes.start(database, newer, in_turn=True))
        )
        starting.start()
        threading.Event().wait(0.3)
        # Catch-up finds the older period missing and claims it, then starts it.
        (older,) = period_rows.write(
            database,
            "sync",
            [Entry(PERIOD, RunStatus.CLAIMED)],
            holder="node-a",
            lease_seconds=30,
            origin=Origin.CATCHUP,
        ).won
        results["older"] = writes.start(database, older, in_turn=True)
        starting.join(timeout=10)
        statuses = {
            str(row["period"]): str(row["status"])
            for row in (queries.run_mapping(database, "sync", moment) for moment in (PERIOD, NEXT))
            if row
        }
    finally:
        database.dispose()
    assert results["newer"] is Started.STARTED
    assert results["older"] is Started.WAIT, "two periods of the job ran at once"
    assert sorted(statuses.values()) == [RunStatus.CLAIMED, RunStatus.RUNNING]
