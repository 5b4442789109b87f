"""The dispatcher's shutdown and its outcome writer on a real database: an outcome that
exists is never traded for an abandon, and no fault in a write stops the writer."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
import structlog

from scheduler.model import Due
from scheduler.registry import job
from scheduler.run.context import RunContext
from scheduler.run.dispatcher import Dispatcher
from scheduler.states import RunStatus
from scheduler.store import claims, pool, queries
from scheduler.store.database import Database, open_database
from tests.waiting import wait_until

PERIOD = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NODE = "node-a"
GRACE_S = 1.0


def test_a_function_that_returned_inside_the_grace_is_not_abandoned(database: Database) -> None:
    """The function returns 10 ms before the grace runs out, while its outcome still
    waits in the writer: the period succeeded, so it must not be given back to be run
    again elsewhere."""
    drain_began = threading.Event()
    entered = threading.Event()

    @job(cron="* * * * *", name="report")
    def report() -> None:
        entered.set()
        drain_began.wait(10)
        time.sleep(GRACE_S - 0.01)

    dispatcher = Dispatcher(database, {"report": report}, NODE, 2, structlog.get_logger())
    (claim,) = claims.claim(database, [Due("report", PERIOD, 30)], NODE).won
    dispatcher.submit(claim)
    assert entered.wait(10)
    drain_began.set()
    abandoned = dispatcher.drain(GRACE_S)
    row = queries.run_mapping(database, "report", PERIOD)
    assert row is not None
    assert (row["status"], abandoned) == (RunStatus.SUCCEEDED, 0)


def test_an_outcome_the_database_cannot_take_does_not_stop_the_writer(database: Database) -> None:
    """A message that no driver can encode (a lone surrogate, as a failed decode leaves)
    is stored in a form it can take, and the runs after it are still recorded."""

    @job(cron="* * * * *", name="decoder")
    def decoder(ctx: RunContext) -> None:
        if ctx.period == PERIOD:
            raise ValueError("cannot decode b'\\xff': \udcff")

    dispatcher = Dispatcher(database, {"decoder": decoder}, NODE, 2, structlog.get_logger())
    later = PERIOD + timedelta(minutes=1)
    for period in (PERIOD, later):
        (claim,) = claims.claim(database, [Due("decoder", period, 30)], NODE).won
        dispatcher.submit(claim).result(timeout=10)
    dispatcher.drain(GRACE_S)
    failed = queries.run_mapping(database, "decoder", PERIOD)
    succeeded = queries.run_mapping(database, "decoder", later)
    assert failed is not None
    assert succeeded is not None
    assert (failed["status"], succeeded["status"]) == (RunStatus.FAILED, RunStatus.SUCCEEDED)
    assert "cannot decode" in str(failed["error_message"])


def test_a_pool_that_runs_dry_delays_an_outcome_but_never_loses_it(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every connection is taken for longer than a checkout may wait: the writer's
    checkout times out (not a driver error), and it must try again, not die."""
    monkeypatch.setattr(pool, "CHECKOUT_TIMEOUT_S", 0.5)
    database = open_database(postgres_url, connections=1)

    @job(cron="* * * * *", name="busy", overlap="allow")
    def busy() -> None:
        pass

    dispatcher = Dispatcher(database, {"busy": busy}, NODE, 1, structlog.get_logger())
    later = PERIOD + timedelta(minutes=1)
    (claim,) = claims.claim(database, [Due("busy", PERIOD, 30, overlap_limit=None)], NODE).won
    (next_claim,) = claims.claim(database, [Due("busy", later, 30, overlap_limit=None)], NODE).won
    try:
        held = database.pool.borrow()
        try:
            threading.Thread(target=dispatcher.submit, args=(claim,), daemon=True).start()
            time.sleep(2)  # the run waits for a connection; checkouts time out meanwhile
        finally:
            database.pool.give_back(held)
        wait_until(
            lambda: (
                (queries.run_mapping(database, "busy", PERIOD) or {}).get("status") == "succeeded"
            )
        )
        dispatcher.submit(next_claim).result(timeout=10)
        row = queries.run_mapping(database, "busy", next_claim.period)
        assert row is not None
        assert row["status"] == RunStatus.SUCCEEDED
    finally:
        dispatcher.drain(GRACE_S)
        database.dispose()
