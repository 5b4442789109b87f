"""The dispatcher on a real database: a node that retakes a run it still holds in memory,
and a renewal that crosses a takeover."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import structlog

from scheduler import logs
from scheduler.alerting.observer import Ending, Watch
from scheduler.model import Claim, Due, Started, lock_key
from scheduler.registry import Job, job
from scheduler.run.context import RunContext
from scheduler.run.dispatcher import Dispatcher
from scheduler.states import Reason, RunStatus
from scheduler.store import claims, queries, renewals, takeover, writes
from scheduler.store.database import Database, open_database
from tests.log_capture import configured
from tests.sql import update
from tests.waiting import wait_until

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
    (first,) = claims.claim(database, [Due("sync", PERIOD, 3)], NODE).won
    first_done = dispatcher.submit(first)
    wait_until(lambda: calls == [1])

    with database.transaction() as connection:
        expired = datetime.now(UTC) - timedelta(seconds=1)
        update(connection, "scheduler_runs", {"id": first.id}, lease_expires_at=expired)
    dispatcher.lose(first.key)
    (stale,) = takeover.find_stale(database, ["sync"], 10)
    second = takeover.retake(database, stale, NODE)
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
    row = queries.run_mapping(database, "sync", PERIOD)
    assert row is not None
    assert (row["status"], row["attempt"]) == (RunStatus.SUCCEEDED, 2)
    dispatcher.drain(1)


def test_runs_are_marked_running_only_as_workers_free_up(database: Database) -> None:
    """Starts go out in batches, but never ahead of a free worker: with two workers no
    more than two functions run at once, and a run's `started_at` is when its function
    was called, not when it was claimed."""
    called: dict[str, datetime] = {}
    inside: list[str] = []
    most_inside = 0
    lock = threading.Lock()

    def body(ctx: RunContext) -> None:
        nonlocal most_inside
        with lock:
            called[ctx.job] = datetime.now(UTC)
            inside.append(ctx.job)
            most_inside = max(most_inside, len(inside))
        time.sleep(0.3)
        with lock:
            inside.remove(ctx.job)

    names = [f"slow-{index}" for index in range(6)]
    jobs = {name: job(cron="* * * * *", name=name)(body) for name in names}
    dispatcher = Dispatcher(database, jobs, NODE, 2, structlog.get_logger())
    won = claims.claim(database, [Due(name, PERIOD, 30) for name in jobs], NODE).won
    for future in [dispatcher.submit(claim) for claim in won]:
        future.result(timeout=10)
    dispatcher.drain(1)
    assert most_inside == 2
    started = []
    for name in names:
        row = queries.run_mapping(database, name, PERIOD)
        assert row is not None
        assert row["status"] == RunStatus.SUCCEEDED
        assert isinstance(row["started_at"], datetime)
        # The database's clock is this machine's here; allow for its rounding.
        assert abs((row["started_at"] - called[name]).total_seconds()) < 0.2, name
        started.append(row["started_at"])
    # Three rounds of two: the last runs started about 0.6 s after the first.
    assert (max(started) - min(started)).total_seconds() >= 0.5


def test_a_renewal_read_before_a_takeover_committed_does_not_lose_it(postgres_url: str) -> None:
    """The heartbeat's renewal is sent while this node's takeover of a dead node's run
    waits for the job's lock: the renewal's snapshot cannot show the new attempt. The
    takeover then commits and the run is submitted; the renewal's answer, which comes
    after, must not be read as 'the lease is gone' (the run would be given up as lost
    the moment it started, and with no retries left the period would end failed)."""
    database = open_database(postgres_url)
    calls: list[int] = []

    @job(cron="* * * * *", name="sync", lease="30s")
    def sync(ctx: RunContext) -> None:
        calls.append(ctx.attempt)
        time.sleep(0.5)
        ctx.checkpoint({"done": True})  # fenced: raises if the run was given up here

    dispatcher = Dispatcher(database, {"sync": sync}, NODE, 4, structlog.get_logger())
    holding = psycopg.connect(postgres_url)
    try:
        (dead,) = claims.claim(database, [Due("sync", PERIOD, 30)], "node-dead").won
        writes.start(database, dead)
        with database.transaction() as connection:
            expired = datetime.now(UTC) - timedelta(seconds=1)
            update(connection, "scheduler_runs", {"id": dead.id}, lease_expires_at=expired)
        (stale,) = takeover.find_stale(database, ["sync"], 10)
        taken: list[Claim | None] = []
        holding.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key("sync"),))
        retaking = threading.Thread(
            target=lambda: taken.append(takeover.retake(database, stale, NODE))
        )
        retaking.start()
        wait_until(lambda: _waits_for_advisory_lock(holding), timeout=10)
        sent = time.monotonic()  # the heartbeat sends its renewal now
        held = renewals.renew_leases(database, NODE)
        holding.rollback()  # the lock goes; the takeover commits
        retaking.join(10)
        (claim,) = taken
        assert claim is not None
        assert claim.lease_from < sent
        assert held == []
        done = dispatcher.submit(claim)
        dispatcher.renewed(held, sent)  # the renewal's answer comes in
        done.result(timeout=10)
        row = queries.run_mapping(database, "sync", PERIOD)
        assert row is not None
        assert (row["status"], row["attempt"]) == (RunStatus.SUCCEEDED, 2)
        assert calls == [2]
    finally:
        dispatcher.drain(1)
        holding.close()
        database.dispose()


def _waits_for_advisory_lock(connection: psycopg.Connection[Any]) -> bool:
    waiting = connection.execute(
        "SELECT count(*) FROM pg_locks"
        " WHERE locktype = 'advisory' AND NOT granted AND database = ("
        "   SELECT oid FROM pg_database WHERE datname = current_database())"
    ).fetchone()
    return bool(waiting and waiting[0])


def _given_back_unstarted(database: Database, period: datetime) -> bool:
    """The run of `period` went back for any node to take, lost before it ever started."""
    row = queries.run_mapping(database, "sync", period)
    assert row is not None
    return (row["status"], row["reason"], row["started_at"]) == (
        RunStatus.ABANDONED,
        Reason.LEASE_EXPIRED,
        None,
    )


def test_a_run_lost_while_it_waits_its_turn_is_given_back(database: Database) -> None:
    """A claim has a worker but waits its turn behind the job's earlier period, which
    runs on another node, polling; its lease is given up meanwhile. It is given back
    unstarted at once, as one lost while it waited for a worker is, not left for its
    lease to run out."""
    calls: list[datetime] = []

    @job(cron="* * * * *", name="sync", lease="30s")
    def sync(ctx: RunContext) -> None:
        calls.append(ctx.period)

    dispatcher = Dispatcher(database, {"sync": sync}, NODE, 2, structlog.get_logger())
    later = PERIOD + timedelta(minutes=1)
    try:
        (mine,) = claims.claim(database, [Due("sync", later, 30)], NODE).won
        (elsewhere,) = claims.claim(database, [Due("sync", PERIOD, 30)], "other-node").won
        assert writes.start(database, elsewhere, in_turn=True) is Started.STARTED
        done = dispatcher.submit(mine)
        time.sleep(0.6)  # its start was refused (not its turn): it polls now
        dispatcher.lose(mine.key)
        done.result(timeout=10)
        assert _given_back_unstarted(database, later)
        assert calls == []
    finally:
        dispatcher.drain(1)


def test_a_run_lost_while_it_waits_for_a_worker_is_not_started(database: Database) -> None:
    """A claim waits for a free worker and its lease is given up meanwhile (its holder's
    deadline passed, or a renewal did not find it). It must not start when a worker
    frees up: its function would run with its items and checkpoints refused, and its
    outcome would be the period's. It is given back unstarted (no attempt counted), for
    any node's recovery to take at once."""
    release = threading.Event()
    calls: list[datetime] = []

    @job(cron="* * * * *", name="sync", lease="30s")
    def sync(ctx: RunContext) -> None:
        calls.append(ctx.period)
        if ctx.period == PERIOD:
            release.wait(10)

    dispatcher = Dispatcher(database, {"sync": sync}, NODE, 1, structlog.get_logger())
    later = PERIOD + timedelta(minutes=1)
    try:
        first, second = claims.claim(
            database, [Due("sync", PERIOD, 30), Due("sync", later, 30)], NODE
        ).won
        first_done = dispatcher.submit(first)
        wait_until(lambda: calls == [PERIOD])
        second_done = dispatcher.submit(second)
        dispatcher.lose(second.key)
        release.set()
        first_done.result(timeout=10)
        second_done.result(timeout=10)
        assert calls == [PERIOD]
        assert _given_back_unstarted(database, later)
        (stale,) = takeover.find_stale(database, ["sync"], 10)
        assert (stale.period, stale.started_attempts) == (later, 0)
    finally:
        release.set()
        dispatcher.drain(1)


class _SlowToHear:
    """A run observer (a Sentry check-in or a span exporter on a slow network) that takes
    its time to hear how each attempt ended."""

    def started(self, job: Job, claim: Claim, node: str) -> Watch | None:
        return _SlowWatch()

    def sending(
        self, job: Job, claim: Claim, node: str, queue: str
    ) -> contextlib.AbstractContextManager[None] | None:
        return None


class _SlowWatch:
    fields: Mapping[str, str] = {}

    def current(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def ended(self, ending: Ending) -> None:
        time.sleep(0.5)


def test_a_run_ends_only_once_its_line_is_out(database: Database, tmp_path: Path) -> None:
    """The lines of one outcome write go out together, but a run's own line is out before
    the run ends here: whoever waits for it (`run-once`, a drain at shutdown) or the job's
    next period may go on, and the line must not come after."""
    together = threading.Barrier(2)

    def body(ctx: RunContext) -> None:
        together.wait(10)  # both end at once: their outcomes share one write

    jobs = {name: job(cron="* * * * *", name=name)(body) for name in ("first", "second")}
    log_path = tmp_path / "node.log"
    with log_path.open("w") as out, configured(out):
        dispatcher = Dispatcher(
            database, jobs, NODE, 4, logs.get_logger(), observers=[_SlowToHear()]
        )
        won = claims.claim(database, [Due(name, PERIOD, 30) for name in jobs], NODE).won
        ends = {dispatcher.submit(claim): claim.job for claim in won}
        done, _ = wait(ends, timeout=10, return_when=FIRST_COMPLETED)
        ended = {ends[future] for future in done}
        lines = [json.loads(line) for line in log_path.read_text().splitlines()]
        succeeded = {line["job"] for line in lines if line["event"] == "run_succeeded"}
        assert ended, "no run ended"
        assert ended <= succeeded, f"{ended} ended before its run_succeeded line was out"
        wait(ends, timeout=10)
        dispatcher.drain(1)


def test_each_run_says_it_started_once_before_its_function_speaks(
    database: Database, tmp_path: Path
) -> None:
    """Runs in a backlog are started in batches, and the starter says `run_started` for a
    batch in one write before any worker calls their functions: still one line a run,
    with a worker's fields, after `run_claimed`'s and before the job's own lines."""

    def body(ctx: RunContext) -> None:
        structlog.get_logger("scheduler").info("job_said")  # bound to the run through contextvars
        time.sleep(0.01)  # so that runs wait for the two workers

    names = [f"job{index}" for index in range(12)]
    jobs = {name: job(cron="* * * * *", name=name)(body) for name in names}
    log_path = tmp_path / "node.log"
    with log_path.open("w") as out, configured(out):
        dispatcher = Dispatcher(database, jobs, NODE, 2, logs.get_logger(node=NODE))
        won = claims.claim(database, [Due(name, PERIOD, 30) for name in names], NODE).won
        wait([dispatcher.submit(claim) for claim in won], timeout=10)
        dispatcher.drain(1)
    lines = [json.loads(line) for line in log_path.read_text().splitlines()]
    for claim in won:
        said = [line for line in lines if line.get("run_id") == claim.id]
        assert [line["event"] for line in said] == ["run_started", "job_said", "run_succeeded"]
        started = said[0]
        assert list(started) == [
            "node", "job", "period", "run_id", "attempt", "origin", "event", "level", "timestamp"
        ]  # fmt: skip
        assert (started["job"], started["period"], started["attempt"], started["origin"]) == (
            claim.job,
            PERIOD.isoformat(),
            1,
            "schedule",
        )


class _BrokenExecutor:
    """A bug in an executor: it raises instead of returning an outcome."""

    def call(self, job: Job, context: RunContext, attach: Any) -> Any:
        raise RuntimeError("a bug in the executor")

    def close(self) -> None:
        pass


def test_a_crash_in_dispatch_records_the_attempt_and_holds_nothing(database: Database) -> None:
    """Whatever breaks in dispatch around a call, the run is not left held (its later
    periods would be skipped behind it): the attempt is recorded failed with the
    traceback of what broke, its lease ended."""

    @job(cron="* * * * *", name="sync")
    def sync() -> None:
        pass

    dispatcher = Dispatcher(database, {"sync": sync}, NODE, 2, structlog.get_logger())
    dispatcher._executors.for_job = lambda _job: _BrokenExecutor()  # type: ignore[method-assign,assignment]
    (claim,) = claims.claim(database, [Due("sync", PERIOD, 30)], NODE).won
    dispatcher.submit(claim).result(timeout=10)
    row = queries.run_mapping(database, "sync", PERIOD)
    assert row is not None
    assert (row["status"], row["error_type"]) == (RunStatus.FAILED, "RuntimeError")
    assert "a bug in the executor" in str(row["error_traceback"])
    assert row["lease_expires_at"] is None
    dispatcher.drain(1.0)


def test_a_run_whose_lease_passed_before_its_call_is_not_called(database: Database) -> None:
    """Issue 41, item 4: a node frozen (SIGSTOP, a paused VM) between the start of a run
    and the call of its function wakes with its lease gone by its own clock; another
    node may have taken the period over meanwhile. It must not call the function (and
    only then find out): it checks its deadline just before the call, and gives the run
    back for its next attempt. The freeze is the claim's `lease_from`, this process's
    clock when the lease was given, seven seconds in the past of a 6 s lease."""
    calls: list[int] = []

    @job(cron="* * * * *", name="sync", lease="6s")
    def sync(ctx: RunContext) -> None:
        calls.append(ctx.attempt)

    dispatcher = Dispatcher(database, {"sync": sync}, NODE, 2, structlog.get_logger())
    (claim,) = claims.claim(database, [Due("sync", PERIOD, 6)], NODE).won
    assert writes.start(database, claim) is Started.STARTED
    frozen = replace(claim, lease_from=time.monotonic() - 7.0)
    assert dispatcher.reserve(["sync"]) == ["sync"]
    assert dispatcher.submit_started(frozen)
    wait_until(lambda: not dispatcher.held())
    assert calls == [], "the function was called with its lease gone"
    row = queries.run_mapping(database, "sync", PERIOD)
    assert row is not None
    assert (row["status"], row["reason"]) == (RunStatus.ABANDONED, Reason.LEASE_EXPIRED)
    assert row["retry_at"] is not None, "the period must run again"
    dispatcher.drain(1.0)
