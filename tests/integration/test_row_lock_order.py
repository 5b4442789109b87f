"""A node's heartbeat (which renews every run it holds) and its starts and outcomes
(each a batch of those same rows) never deadlock. A deadlock is not harmless:
PostgreSQL breaks it only after `deadlock_timeout` (1 s), with the start's row already
marked running, so a peer judging overlap in that second saw a body running that had
not begun (it skipped the next period behind it), and the heartbeat that lost the
deadlock renewed nothing. The starts and outcomes lock their rows in no order; the
process's renewals take turns with them (`store.batch_gate`): without that, this test
ends in `deadlock detected`.

PostgreSQL only: SQLite takes the whole database's write lock for every transaction.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from scheduler.model import Claim, Due, Finish, StartRequest
from scheduler.policy import Pool
from scheduler.states import RunStatus
from scheduler.store import claims, concurrency, renewals, writes
from scheduler.store.database import Database, open_database

PERIOD = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
JOBS = 40
HOLDER = "node-a"


def _slow_rows(postgres_url: str) -> None:
    """Each update of one of the holder's rows lingers a little after taking the row's
    lock (a BEFORE trigger runs with it held): two statements that take the same rows
    in different orders, at once, then meet each other mid-way, as they do under load."""
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(
            f"""
            CREATE FUNCTION linger() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN PERFORM pg_sleep(0.01); RETURN NEW; END $$;
            CREATE TRIGGER linger BEFORE UPDATE ON scheduler_runs FOR EACH ROW
            WHEN (OLD.holder = '{HOLDER}') EXECUTE FUNCTION linger();
            """
        )


def _claimed(database: Database, *, spread: bool = False) -> list[Claim]:
    """One claimed run for each of JOBS jobs; `spread`: each at a period of its own."""
    due = [
        Due(f"job-{number:03}", PERIOD + timedelta(minutes=number if spread else 0), 300)
        for number in range(JOBS)
    ]
    random.Random(7).shuffle(due)
    # One chunk a job: each row lands in the heap in this shuffled order, not in id order.
    won = []
    for item in due:
        won += claims.claim(database, [item], HOLDER).won
    assert len(won) == JOBS
    return won


def _together(*writes_: Callable[[], object]) -> list[BaseException]:
    """Run the writes at once; the errors they raised."""
    errors: list[BaseException] = []

    def run(write: Callable[[], object]) -> None:
        try:
            write()
        except BaseException as error:  # noqa: BLE001 - the test reports it
            errors.append(error)

    threads = [threading.Thread(target=run, args=(write,)) for write in writes_]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return errors


@pytest.mark.postgres
def test_a_start_batch_and_the_heartbeat_do_not_deadlock(postgres_url: str) -> None:
    database = open_database(postgres_url)
    try:
        won = _claimed(database)
        _slow_rows(postgres_url)
        starts = [StartRequest(claim) for claim in sorted(won, key=lambda c: c.id, reverse=True)]
        errors = _together(
            lambda: writes.record(database, [], starts),
            lambda: renewals.renew_leases(database, HOLDER),
        )
        assert errors == [], f"a start and a renewal deadlocked: {errors}"
        outcomes = [Finish(claim, RunStatus.SUCCEEDED, 10) for claim in won]
        random.Random(8).shuffle(outcomes)
        errors = _together(
            lambda: writes.record(database, outcomes, []),
            lambda: renewals.renew_leases(database, HOLDER),
        )
        assert errors == [], f"an outcome batch and a renewal deadlocked: {errors}"
    finally:
        database.dispose()


@pytest.mark.postgres
def test_a_pooled_start_batch_and_the_heartbeat_do_not_deadlock(postgres_url: str) -> None:
    """A pool's starts write their rows one at a time in the pool's order, oldest period
    first, which is not id order (the soak saw them deadlock with a renewal once in 10
    minutes before they took their turn too)."""
    database = open_database(postgres_url)
    try:
        won = _claimed(database, spread=True)
        concurrency.declare(database, [Pool("reports", limit=JOBS)])
        _slow_rows(postgres_url)
        starts = [StartRequest(claim, pool="reports", pool_limit=JOBS) for claim in won]
        assert [c.id for c in sorted(won, key=lambda c: c.period)] != sorted(c.id for c in won)
        errors = _together(
            lambda: concurrency.start(database, starts),
            lambda: renewals.renew_leases(database, HOLDER),
        )
        assert errors == [], f"a pooled start and a renewal deadlocked: {errors}"
    finally:
        database.dispose()
