"""The dispatcher on a real database: a node that retakes a run it still holds in memory."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import structlog
from sqlalchemy import update

from scheduler.context import RunContext
from scheduler.dispatch import Dispatcher
from scheduler.registry import job
from scheduler.states import RunStatus
from scheduler.store import runs
from scheduler.store.database import Database
from scheduler.store.runs import Due
from scheduler.store.schema import runs as runs_table

PERIOD = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NODE = "node-a"


def test_a_run_retaken_by_its_own_node_runs_after_the_lost_attempt(database: Database) -> None:
    """An outage longer than the lease: this node's recovery retakes its own run as
    attempt 2 while attempt 1 is still inside the job. Attempt 2 must wait for attempt 1,
    then run, and its outcome (not attempt 1's) is the period's."""
    release = threading.Event()
    calls: list[int] = []

    @job(cron="* * * * *", name="sync", lease="3s")
    def sync(ctx: RunContext) -> None:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            release.wait(10)

    dispatcher = Dispatcher(database, {"sync": sync}, NODE, 4, structlog.get_logger())
    (first,) = runs.claim(database, [Due("sync", PERIOD, 3)], NODE).won
    first_done = dispatcher.submit(first)
    _wait_until(lambda: calls == [1])

    with database.transaction() as connection:
        connection.execute(
            update(runs_table)
            .where(runs_table.c.id == first.id)
            .values(lease_expires_at=datetime.now(UTC) - timedelta(seconds=1))
        )
    dispatcher.lose(first.key)
    (stale,) = runs.find_stale(database, ["sync"], 10)
    second = runs.retake(database, stale, NODE)
    assert second is not None
    assert (second.id, second.attempt) == (first.id, 2)
    second_done = dispatcher.submit(second)
    assert {claim.key for claim in dispatcher.held()} == {first.key, second.key}
    assert calls == [1], "attempt 2 must not start beside attempt 1 on the same node"

    release.set()
    first_done.result(timeout=10)
    second_done.result(timeout=10)
    assert calls == [1, 2]
    assert dispatcher.held() == []
    row = runs.get(database, "sync", PERIOD)
    assert row is not None
    assert (row["status"], row["attempt"]) == (RunStatus.SUCCEEDED, 2)
    dispatcher.drain(1)


def _wait_until(condition: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)
