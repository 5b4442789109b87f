"""A node's jobs hold at most their share of its connections: a node may have more
workers than connections, and whatever its jobs write, its own threads (claims, starts,
outcomes, heartbeats) still find one."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from datetime import UTC, datetime

import psycopg
import pytest
import structlog

from scheduler.model import Due
from scheduler.node.daemon import SIDE_CONNECTIONS, pool_size
from scheduler.registry import Job, job
from scheduler.run import dispatcher as dispatching
from scheduler.run.context import RunContext
from scheduler.run.dispatcher import Dispatcher
from scheduler.states import RunStatus
from scheduler.store import claims, pool, queries
from scheduler.store.database import Database, open_database
from scheduler.store.faults import StoreUnavailableError
from tests.waiting import wait_until

PERIOD = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
NODE = "node-a"


def test_a_share_lends_at_most_its_places_and_leaves_the_rest_of_the_pool(
    database_url: str,
) -> None:
    database = open_database(database_url, connections=3)
    share = database.shared(2, holders="jobs")
    inside = threading.Semaphore(0)
    leave = threading.Event()
    most_inside = 0
    now_inside = 0
    count = threading.Lock()

    def hold() -> None:
        nonlocal most_inside, now_inside
        # autocommit: SQLite's write lock would queue a second transaction by itself.
        with share.autocommit() as connection:
            connection.execute("SELECT 1")
            with count:
                now_inside += 1
                most_inside = max(most_inside, now_inside)
            inside.release()
            leave.wait(10)
            with count:
                now_inside -= 1

    threads = [threading.Thread(target=hold) for _ in range(3)]
    try:
        for thread in threads:
            thread.start()
        assert inside.acquire(timeout=5)
        assert inside.acquire(timeout=5)
        assert not inside.acquire(timeout=0.5), "a third borrower got past a share of two"
        with database.autocommit() as connection:  # the pool's third connection is free
            assert connection.execute("SELECT 1").scalar() == 1
        leave.set()
        assert inside.acquire(timeout=5), "the third borrower never got its turn"
    finally:
        leave.set()
        for thread in threads:
            thread.join(10)
        database.dispose()
    assert most_inside == 2


def test_a_share_that_stays_full_fails_the_borrower_as_a_dry_pool_does(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pool, "CHECKOUT_TIMEOUT_S", 0.3)
    database = open_database(database_url, connections=3)
    share = database.shared(1, holders="jobs")
    try:
        with (
            share.autocommit(),
            pytest.raises(StoreUnavailableError, match="1 in use by jobs"),
            share.autocommit(),
        ):
            pass
        with share.autocommit() as connection:  # its place was given back
            assert connection.execute("SELECT 1").scalar() == 1
    finally:
        database.dispose()


def test_a_node_with_more_workers_than_connections_keeps_its_pool_bounded() -> None:
    assert pool_size(8) == 8 + SIDE_CONNECTIONS
    assert pool_size(dispatching.JOB_CONNECTIONS * 4) == (
        dispatching.JOB_CONNECTIONS + SIDE_CONNECTIONS
    )


def _waiting_item_writes(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO scheduler_items%'"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _status(database: Database, run_id: str) -> str | None:
    row = queries.run_by_id(database, run_id)
    return None if row is None else row.status


@pytest.mark.postgres
def test_jobs_stuck_in_their_item_writes_hold_only_their_share_and_runs_still_end(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six workers, a jobs' share of two: while the items table is locked, six jobs try
    to record an item and only two of them hold a connection (blocked on the lock); a
    seventh job that writes nothing still gets its outcome written through the rest of
    the pool. When the lock goes, every run succeeds."""
    monkeypatch.setattr(dispatching, "JOB_CONNECTIONS", 2)
    workers = 7
    database = open_database(postgres_url, connections=pool_size(workers))

    def writer(name: str) -> Job:
        @job(cron="* * * * *", name=name)
        def body(ctx: RunContext) -> None:
            ctx.once(f"{name}-item")

        return body

    writers = {f"writer{index}": writer(f"writer{index}") for index in range(6)}

    @job(cron="* * * * *", name="quiet")
    def quiet(ctx: RunContext) -> None:
        del ctx

    jobs = {**writers, "quiet": quiet}
    dispatcher = Dispatcher(database, jobs, NODE, workers, structlog.get_logger())
    locker = psycopg.connect(postgres_url)
    try:
        locker.execute("LOCK TABLE scheduler_items IN ACCESS EXCLUSIVE MODE")
        won = claims.claim(database, [Due(name, PERIOD, 60) for name in writers], NODE).won
        done: list[Future[None]] = [dispatcher.submit(claim) for claim in won]
        wait_until(lambda: _waiting_item_writes(postgres_url) == 2)
        (quiet_claim,) = claims.claim(database, [Due("quiet", PERIOD, 60)], NODE).won
        dispatcher.submit(quiet_claim).result(timeout=10)
        wait_until(lambda: _status(database, quiet_claim.id) == RunStatus.SUCCEEDED)
        time.sleep(0.3)  # the four others still wait for a place, not for the lock
        assert _waiting_item_writes(postgres_url) == 2
        locker.rollback()
        for future in done:
            future.result(timeout=10)
        wait_until(lambda: all(_status(database, claim.id) == RunStatus.SUCCEEDED for claim in won))
    finally:
        locker.close()
        dispatcher.drain(1)
        database.dispose()
