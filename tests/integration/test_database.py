"""Opening a database: the settings each backend runs with."""

from __future__ import annotations

import time

import pytest

from scheduler.store.database import open_database
from scheduler.store.faults import StoreUnavailableError
from tests.acceptance.tcp_proxy import Proxy


def test_sqlite_commits_are_durable_across_a_power_loss(sqlite_url: str) -> None:
    """In WAL mode, `synchronous=NORMAL` may roll back the last commits on a power loss
    (SQLite's documentation): a claim the node acted on could vanish and run again.
    FULL syncs the log at every commit."""
    database = open_database(sqlite_url)
    try:
        with database.transaction() as connection:
            mode = connection.execute("PRAGMA journal_mode").scalar()
            synchronous = connection.execute("PRAGMA synchronous").scalar()
    finally:
        database.dispose()
    assert (mode, synchronous) == ("wal", 2)  # 2 is FULL


def test_a_call_on_a_connection_that_stopped_passing_bytes_fails_at_its_deadline(
    postgres_url: str,
) -> None:
    """A stalled connection neither fails nor answers (the server never sees the query):
    the call's own deadline cuts it from this side, and the pool goes on with a new one."""
    proxy = Proxy(target_port=5432)
    proxy.start()
    database = open_database(proxy.url(postgres_url)).bounded(1.0)
    try:
        database.ping()
        proxy.freeze()
        began = time.monotonic()
        with pytest.raises(StoreUnavailableError), database.transaction() as connection:
            connection.execute("SELECT 1")
        assert time.monotonic() - began < 3
        proxy.thaw()
        database.ping()
    finally:
        proxy.thaw()
        database.dispose()
        proxy.cut()
