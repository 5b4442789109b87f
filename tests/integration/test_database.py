"""Opening a database: the settings each backend runs with."""

from __future__ import annotations

from sqlalchemy import text

from scheduler.store.database import open_database


def test_sqlite_commits_are_durable_across_a_power_loss(sqlite_url: str) -> None:
    """In WAL mode, `synchronous=NORMAL` may roll back the last commits on a power loss
    (SQLite's documentation): a claim the node acted on could vanish and run again.
    FULL syncs the log at every commit."""
    database = open_database(sqlite_url)
    try:
        with database.transaction() as connection:
            mode = connection.execute(text("PRAGMA journal_mode")).scalar_one()
            synchronous = connection.execute(text("PRAGMA synchronous")).scalar_one()
    finally:
        database.dispose()
    assert (mode, synchronous) == ("wal", 2)  # 2 is FULL
