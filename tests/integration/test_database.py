"""Opening a database: the settings each backend runs with."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from scheduler.model import Due, StartRequest
from scheduler.states import RunStatus
from scheduler.store import claims, writes
from scheduler.store.database import Database, open_database
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
        _cut_at_its_deadline(database)
        proxy.thaw()
        database.ping()
    finally:
        proxy.thaw()
        database.dispose()
        proxy.cut()


def test_a_stalled_call_fails_at_its_deadline_behind_a_later_one_of_another_handle(
    postgres_url: str,
) -> None:
    """The watch thread sleeps until the earliest deadline it holds and is woken only
    for an earlier one: a 1 s call made after a 60 s one (ended or still running) must
    still be cut at 1 s, not when the 60 s deadline comes."""
    proxy = Proxy(target_port=5432)
    proxy.start()
    patient = open_database(postgres_url).bounded(60.0)
    hasty = open_database(proxy.url(postgres_url)).bounded(1.0)
    try:
        hasty.ping()
        time.sleep(1.5)  # past the ping's deadline: the watch has dropped it
        patient.ping()  # ended: its deadline, 60 s away, is now first in the watch's heap
        proxy.freeze()
        with patient.transaction() as slow:
            slow.execute("SELECT 1")  # and one still running across the stall
            _cut_at_its_deadline(hasty)
        proxy.thaw()
        hasty.ping()
    finally:
        proxy.thaw()
        patient.dispose()
        hasty.dispose()
        proxy.cut()


def _cut_at_its_deadline(database: Database) -> None:
    """A call of a 1 s handle on a stalled connection fails, in well under 3 s."""
    began = time.monotonic()
    with pytest.raises(StoreUnavailableError), database.transaction() as connection:
        connection.execute("SELECT 1")
    assert time.monotonic() - began < 3


def _prepared(database: Database) -> list[str]:
    with database.autocommit() as connection:
        return [
            str(text)
            for (text,) in connection.execute("SELECT statement FROM pg_prepared_statements")
        ]


@pytest.mark.postgres
def test_a_start_batch_is_planned_once_a_session_only_where_sessions_are_the_nodes(
    postgres_url: str,
) -> None:
    """Nothing is prepared on the server until the node says its connections are
    sessions of its own (no transaction pooler between, where a statement prepared on
    one server connection is missing on the next). From then on a start batch sent again
    and again is prepared on the session and planned once, not at every batch."""
    database = open_database(postgres_url, connections=1)  # one session to look into
    try:
        period = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
        due = [Due(f"job{index}", period, 60) for index in range(20)]
        won = claims.claim(database, due, "node-a").won
        for claim in won[:8]:
            writes.record(database, [], [StartRequest(claim, in_turn=True)])
        assert _prepared(database) == []

        database.bounded(5.0).prepare_statements()  # any handle on the pool decides
        for claim in won[8:]:
            writes.record(database, [], [StartRequest(claim, in_turn=True)])
        prepared = _prepared(database)
        assert [text for text in prepared if "SET status = 'running'" in text], prepared
        assert _statuses(database) == {RunStatus.RUNNING.value: 20}
    finally:
        database.dispose()


def test_on_sqlite_the_switch_leaves_statements_to_the_driver(sqlite_url: str) -> None:
    """SQLite keeps a statement cache of its own: a node that asks for prepared
    statements there claims and starts as before."""
    database = open_database(sqlite_url)
    try:
        database.prepare_statements()
        period = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
        won = claims.claim(
            database, [Due(f"job{index}", period, 60) for index in range(3)], "a"
        ).won
        writes.record(database, [], [StartRequest(claim, in_turn=True) for claim in won])
        assert _statuses(database) == {RunStatus.RUNNING.value: 3}
    finally:
        database.dispose()


def _statuses(database: Database) -> dict[str, int]:
    with database.autocommit() as connection:
        rows = connection.execute("SELECT status, count(*) FROM scheduler_runs GROUP BY status")
        return {str(status): int(count) for status, count in rows}


def test_no_transaction_of_the_scheduler_compiles_its_plans(postgres_url: str) -> None:
    """JIT is off in every transaction (a claim's plan on a large runs table crossed
    `jit_above_cost` and spent most of its time compiling), and only in it."""
    database = open_database(postgres_url)
    try:
        with database.guarded(jobs=["a"]) as guarded:
            assert guarded.connection.execute("SHOW jit").scalar() == "off"
        with database.guarded() as guarded:
            assert guarded.connection.execute("SHOW jit").scalar() == "off"
        with database.transaction() as connection:
            assert connection.execute("SHOW jit").scalar() == "off"
    finally:
        database.dispose()
