"""The dispatcher's side of a pool on a real database: a run held back waits on no worker
thread, starts as soon as the slot frees, runs once, and is given back at once when its
lease is given up or its node drains while it waits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import structlog

from scheduler import Pool
from scheduler.model import Due, Started, StartRequest
from scheduler.registry import job
from scheduler.run.context import RunContext
from scheduler.run.dispatcher import Dispatcher
from scheduler.states import Reason, RunStatus
from scheduler.store import claims, concurrency, queries
from scheduler.store.database import Database
from tests.sql import update
from tests.waiting import wait_until

PERIOD = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ONE = Pool("one", limit=1)


def _occupy(database: Database) -> Due:
    """A run of another node holds the pool's one slot."""
    due = Due("elsewhere", PERIOD, 30)
    (held,) = claims.claim(database, [due], "node-b").won
    request = StartRequest(held, pool="one", pool_limit=1)
    assert concurrency.start(database, [request]) == [Started.STARTED]
    return due


def _waiting(database: Database, period: datetime) -> bool:
    """The run of `pooled` at `period` is claimed and waits for its pool."""
    return (queries.run_mapping(database, "pooled", period) or {}).get("reason") == "pool"


def test_a_held_back_run_waits_on_no_thread_and_starts_once_when_the_slot_frees(
    database: Database,
) -> None:
    calls: list[int] = []
    concurrency.declare(database, [ONE])

    @job(cron="* * * * *", name="pooled", pool=ONE, overlap="allow")
    def pooled(ctx: RunContext) -> None:
        calls.append(ctx.attempt)

    @job(cron="* * * * *", name="free", overlap="allow")
    def free(ctx: RunContext) -> None:
        calls.append(0)

    _occupy(database)
    dispatcher = Dispatcher(
        database, {"pooled": pooled, "free": free}, "node-a", 1, structlog.get_logger()
    )
    (waiting,) = claims.claim(database, [Due("pooled", PERIOD, 30)], "node-a").won
    done = dispatcher.submit(waiting)
    wait_until(lambda: _waiting(database, PERIOD))
    # Its node's one worker is free for other jobs meanwhile.
    (other,) = claims.claim(database, [Due("free", PERIOD, 30)], "node-a").won
    dispatcher.submit(other).result(timeout=10)
    assert calls == [0]
    # The other node's run ends: the slot frees, and the waiting run starts within a poll.
    with database.transaction() as connection:
        update(
            connection,
            "scheduler_runs",
            {"job": "elsewhere"},
            status=RunStatus.SUCCEEDED.value,
            lease_expires_at=None,
        )
    done.result(timeout=10)
    assert calls == [0, 1], "the held-back run ran once when its slot freed"
    row = queries.run_mapping(database, "pooled", PERIOD)
    assert row is not None
    assert (row["status"], row["reason"], row["pool"]) == (RunStatus.SUCCEEDED, None, "one")
    dispatcher.drain(1)


def test_a_held_back_run_is_given_back_when_its_lease_is_lost_or_its_node_drains(
    database: Database,
) -> None:
    concurrency.declare(database, [ONE])

    @job(cron="* * * * *", name="pooled", pool=ONE, overlap="allow")
    def pooled(ctx: RunContext) -> None:
        raise AssertionError("a run held back by its pool must not run")

    _occupy(database)
    dispatcher = Dispatcher(database, {"pooled": pooled}, "node-a", 2, structlog.get_logger())
    later = PERIOD + timedelta(minutes=1)
    first, second = claims.claim(
        database, [Due("pooled", PERIOD, 30), Due("pooled", later, 30)], "node-a"
    ).won
    lost = dispatcher.submit(first)
    drained = dispatcher.submit(second)

    wait_until(lambda: _waiting(database, PERIOD) and _waiting(database, later))
    dispatcher.lose(first.key)
    lost.result(timeout=10)
    row = queries.run_mapping(database, "pooled", PERIOD)
    assert row is not None
    assert (row["status"], row["reason"]) == (RunStatus.ABANDONED, Reason.LEASE_EXPIRED)
    dispatcher.drain(1)
    drained.result(timeout=10)
    row = queries.run_mapping(database, "pooled", later)
    assert row is not None
    assert (row["status"], row["reason"]) == (RunStatus.ABANDONED, Reason.SHUTDOWN)
