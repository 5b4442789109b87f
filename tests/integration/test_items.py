"""The items and checkpoints on real databases: once, item, the job's own transaction,
fencing, and what operators see."""

from __future__ import annotations

import math
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
import structlog
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, insert, select
from sqlalchemy.orm import Session

from scheduler import RunLostError, model
from scheduler.model import Claim, Due
from scheduler.node.registration import register
from scheduler.node.schedule_loop import plan
from scheduler.registry import job
from scheduler.run.context import RunContext
from scheduler.run.items import RunItems, run_context
from scheduler.run.job_table import JobTable
from scheduler.schedules import Schedules
from scheduler.states import Origin, RunStatus
from scheduler.store import claims, items, queries, takeover, writes
from scheduler.store import schedules as stored_schedules
from scheduler.store.database import Database, open_database
from tests.integration.contexts import context_for
from tests.sql import rows as table_rows

PERIOD = datetime(2026, 11, 1, tzinfo=UTC)
app_metadata = MetaData()
invoices = Table(
    "app_invoices",
    app_metadata,
    Column("customer", String(50), primary_key=True),
    Column("n", Integer),
)


def _claim(
    database: Database, job: str = "billing", period: datetime = PERIOD, node: str = "a"
) -> Claim:
    (claim,) = claims.claim(database, [Due(job, period, 30, overlap_limit=None)], node).won
    assert writes.start(database, claim) is model.Started.STARTED
    return claim


def _next_attempt(database: Database, claim: Claim, node: str = "b") -> Claim:
    """Fail the attempt with a retry due now and take it over, as the recovery loop does."""
    assert writes.finish(database, claim, RunStatus.FAILED, 1, retry_in=0)
    (stale,) = [s for s in takeover.find_stale(database, [claim.job], 10) if s.id == claim.id]
    taken = takeover.retake(database, stale, node)
    assert taken is not None
    assert writes.start(database, taken) is model.Started.STARTED
    return taken


def _item_rows(database: Database) -> dict[str, dict[str, object]]:
    return {row["key"]: row for row in table_rows(database, "scheduler_items")}


def _app_engine(database_url: str):  # the job's own engine, not the scheduler's
    url = database_url.replace("postgresql://", "postgresql+psycopg://", 1)
    engine = create_engine(url)
    app_metadata.create_all(engine)
    return engine


def test_once_answers_true_to_the_first_claimant_only(database: Database) -> None:
    first = context_for(database, _claim(database))
    later = context_for(database, _claim(database, period=PERIOD + timedelta(days=30), node="b"))
    assert first.once("invoice:42") is True
    assert first.once("invoice:42") is False
    assert later.once("invoice:42") is False
    assert later.once("invoice:43") is True
    row = _item_rows(database)["invoice:42"]
    assert (row["state"], row["run_id"], row["attempt"], row["node"]) == (
        "done",
        first.run_id,
        1,
        "a",
    )
    assert row["period"] == PERIOD
    # Another job has keys of its own.
    other = context_for(database, _claim(database, job="mailing"))
    assert other.once("invoice:42") is True


def test_contending_runs_claim_each_key_once(database_url: str, database: Database) -> None:
    claims = [_claim(database, period=PERIOD + timedelta(hours=n), node=f"n{n}") for n in range(6)]
    keys = [f"k{n}" for n in range(150)]
    barrier = threading.Barrier(len(claims))
    won: list[list[str]] = [[] for _ in claims]

    def contend(index: int) -> None:
        own = open_database(database_url)
        try:
            run_items = RunItems(own, claims[index])
            barrier.wait()
            won[index] = [key for key in keys if run_items.once(key)]
        finally:
            own.dispose()

    threads = [threading.Thread(target=contend, args=(n,)) for n in range(len(claims))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    counted = Counter(key for keys_won in won for key in keys_won)
    assert sorted(counted) == sorted(keys)
    assert set(counted.values()) == {1}


def test_the_record_commits_and_rolls_back_with_the_jobs_transaction(
    database_url: str, database: Database
) -> None:
    ctx = context_for(database, _claim(database))
    engine = _app_engine(database_url)
    try:
        with engine.connect() as connection:
            transaction = connection.begin()
            assert ctx.once("customer:1", connection=connection) is True
            connection.execute(insert(invoices).values(customer="1", n=1))
            transaction.rollback()
        assert "customer:1" not in _item_rows(database)
        with engine.begin() as connection:
            assert ctx.once("customer:1", connection=connection) is True
            connection.execute(insert(invoices).values(customer="1", n=2))
        with Session(engine) as session, session.begin():
            assert ctx.once("customer:1", connection=session) is False
            assert ctx.once("customer:2", connection=session) is True
            session.execute(insert(invoices).values(customer="2", n=1))
        with engine.connect() as connection:
            rows = connection.execute(select(invoices.c.customer, invoices.c.n)).all()
    finally:
        engine.dispose()
    assert sorted(rows) == [("1", 2), ("2", 1)]
    assert {key: row["state"] for key, row in _item_rows(database).items()} == {
        "customer:1": "done",
        "customer:2": "done",
    }


def test_connection_must_be_sqlalchemy(database: Database) -> None:
    ctx = context_for(database, _claim(database))
    with pytest.raises(TypeError, match="connection= takes a SQLAlchemy Connection or Session"):
        ctx.once("k", connection=object())


def test_item_is_done_after_the_block_and_released_when_it_raises(database: Database) -> None:
    claim = _claim(database)
    ctx = context_for(database, claim)
    with ctx.item("mail:1") as fresh:
        assert fresh is True
        assert _item_rows(database)["mail:1"]["state"] == "claimed"
    assert _item_rows(database)["mail:1"]["state"] == "done"
    assert _item_rows(database)["mail:1"]["done_at"] is not None
    with ctx.item("mail:1") as fresh:
        assert fresh is False

    def send_and_fail() -> None:
        with ctx.item("mail:2") as fresh:
            assert fresh is True
            raise ConnectionError("smtp refused")

    with pytest.raises(ConnectionError):
        send_and_fail()
    assert "mail:2" not in _item_rows(database)

    retry = context_for(database, _next_attempt(database, claim))
    with retry.item("mail:2") as fresh:
        assert fresh is True
    row = _item_rows(database)["mail:2"]
    assert (row["state"], row["attempt"], row["node"]) == ("done", 2, "b")


def test_a_run_that_is_no_longer_ours_claims_and_checkpoints_nothing(database: Database) -> None:
    claim = _claim(database)
    stale = context_for(database, claim)
    _next_attempt(database, claim)
    with pytest.raises(RunLostError, match="no longer held by attempt 1"):
        stale.once("k")
    with pytest.raises(RunLostError), stale.item("k"):
        pass
    with pytest.raises(RunLostError):
        stale.checkpoint({"next": 5})
    assert _item_rows(database) == {}


def test_a_checkpoint_is_read_by_the_next_attempt(database: Database) -> None:
    claim = _claim(database)
    first = context_for(database, claim)
    assert first.last_checkpoint is None
    first.checkpoint({"next": 3, "customers": ["a", "b"]})
    first.checkpoint({"next": 4, "customers": ["a", "b"]})
    # What earlier attempts left, not what this attempt wrote since.
    assert first.last_checkpoint is None
    second = context_for(database, _next_attempt(database, claim))
    assert second.last_checkpoint == {"next": 4, "customers": ["a", "b"]}
    second.checkpoint([1, 2])
    assert second.last_checkpoint == {"next": 4, "customers": ["a", "b"]}
    row = queries.run_mapping(database, claim.job, claim.period)
    assert row is not None
    assert row["checkpoint"] == "[1, 2]"
    # Another period starts with nothing.
    other = context_for(database, _claim(database, period=PERIOD + timedelta(days=1)))
    assert other.last_checkpoint is None


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        ({"when": datetime(2026, 1, 1, tzinfo=UTC)}, "datetime is not JSON serializable"),
        ({1, 2}, "set is not JSON serializable"),
        ({"x": math.nan}, "Out of range float values"),
    ],
)
def test_a_checkpoint_that_is_not_json_is_refused(
    database: Database, value: object, detail: str
) -> None:
    claim = _claim(database)
    ctx = context_for(database, claim)
    with pytest.raises(TypeError, match=rf"job 'billing': checkpoint: .*{detail}"):
        ctx.checkpoint(value)
    row = queries.run_mapping(database, claim.job, claim.period)
    assert row is not None
    assert row["checkpoint"] is None


def test_bad_keys_and_a_context_without_database_are_clear_errors(database: Database) -> None:
    ctx = context_for(database, _claim(database))
    for bad in ("", "x" * 501, 42):
        with pytest.raises(ValueError, match="job 'billing': item key: must be a non-empty string"):
            ctx.once(bad)  # type: ignore[arg-type]
    bare = RunContext("solo", PERIOD, "r", 1, "n", Origin.MANUAL, structlog.get_logger())
    with pytest.raises(RuntimeError, match="job 'solo': this RunContext has no database"):
        bare.once("k")


def test_operators_see_stuck_items_and_settle_them(database: Database) -> None:
    claim = _claim(database)
    ctx = context_for(database, claim)
    assert ctx.once("sent")
    holder = ctx.item("in-flight")
    assert holder.__enter__() is True  # the block has begun; the attempt still runs
    listed = {row.key: row for row in items.list_items(database, "billing")}
    assert (listed["in-flight"].state, listed["in-flight"].stuck) == ("claimed", False)
    assert items.list_items(database, "billing", stuck_only=True) == []
    assert items.release_item(database, "billing", "in-flight") is False
    assert items.mark_done(database, "billing", "in-flight") is False

    # The attempt ends without finishing the block (as if its process had died).
    _next_attempt(database, claim)
    (stuck,) = items.list_items(database, "billing", stuck_only=True)
    assert (stuck.key, stuck.attempt, stuck.stuck) == ("in-flight", 1, True)
    assert items.mark_done(database, "billing", "in-flight") is True
    assert items.list_items(database, "billing", stuck_only=True) == []
    holder.__exit__(None, None, None)  # too late: an operator settled it
    assert items.get_item(database, "billing", "in-flight") == stuck.__class__(
        **{
            **stuck.__dict__,
            "state": "done",
            "done_at": _item_rows(database)["in-flight"]["done_at"],
        }
    )
    assert items.release_item(database, "billing", "sent") is True
    assert sorted(row.key for row in items.list_items(database, "billing")) == ["in-flight"]


def test_previous_is_the_newest_earlier_period_that_reached_an_outcome(
    database: Database,
) -> None:
    """`ctx.previous`: what a run picks up from. Not a period skipped or missed (nothing
    ran), not one still running, not one given back unstarted; a failed one is, with
    its status, and a later period's own checkpoint is never read."""
    day = timedelta(days=1)
    first = _claim(database)
    assert context_for(database, first).previous is None
    context_for(database, first).checkpoint({"synced_to": "2026-11-01"})
    assert writes.finish(database, first, RunStatus.SUCCEEDED, 5)
    failed = _claim(database, period=PERIOD + day)
    assert writes.finish(database, failed, RunStatus.FAILED, 5)
    claims.claim(database, [Due("billing", PERIOD + 2 * day, 30, overlap_limit=None)], "a")
    (unstarted,) = claims.claim(
        database, [Due("billing", PERIOD + 3 * day, 30, overlap_limit=None)], "a"
    ).won
    assert writes.finish(database, unstarted, RunStatus.ABANDONED, None)  # given back unstarted
    running = _claim(database, period=PERIOD + 4 * day)
    context_for(database, running).checkpoint({"synced_to": "never read"})
    later = context_for(database, _claim(database, period=PERIOD + 5 * day))
    previous = later.previous
    assert previous is not None
    assert (previous.period, previous.status, previous.succeeded) == (
        PERIOD + day,
        RunStatus.FAILED,
        False,
    )
    assert previous.finished_at is not None
    assert previous.checkpoint is None
    assert writes.finish(database, failed, RunStatus.SUCCEEDED, 5) is False  # ended: refused
    # The failed period behind it read the success before, and its checkpoint.
    behind = context_for(database, failed).previous
    assert behind is not None
    assert (behind.period, behind.status, behind.attempt) == (PERIOD, RunStatus.SUCCEEDED, 1)
    assert behind.checkpoint == {"synced_to": "2026-11-01"}
    # Another job's history is not this one's.
    assert (
        context_for(database, _claim(database, job="other", period=PERIOD + 9 * day)).previous
        is None
    )


def _tenant_sync(ctx: RunContext, tenant: str) -> None:
    del ctx, tenant


def test_a_schedule_reads_its_own_previous_period(database: Database) -> None:
    """Two schedules created at run time from one template, their periods interleaved
    (keys `tenant-1` and `tenant-10`), and runs under the template's own name: each run
    a fire pass claimed for a schedule reads its own schedule's previous period and
    checkpoint, never its sibling's nor the template's, even when theirs are newer."""
    jobs = {"tenant_sync": job(cron=None, name="tenant_sync")(_tenant_sync)}
    register(database, jobs)
    with database.transaction() as connection:
        start = stored_schedules.clock(connection).replace(microsecond=0) - timedelta(seconds=150)
    periods = {"tenant-1": [0, 60, 120], "tenant-10": [20, 80, 140]}  # seconds after start
    for key, offsets in periods.items():
        first = start + timedelta(seconds=offsets[0])
        Schedules(database).create(key, "tenant_sync", every=60, start=first, args={"tenant": key})
        with database.transaction() as connection:  # due since its first period, unfired
            connection.execute(
                "UPDATE scheduler_schedules SET next_due_at = :first WHERE key = :key",
                {"first": first, "key": key},
            )
    for seconds in (-10, 130):  # the template's own name, before and between the schedules'
        ran = _claim(database, job="tenant_sync", period=start + timedelta(seconds=seconds))
        context_for(database, ran).checkpoint({"job": "tenant_sync"})
        assert writes.finish(database, ran, RunStatus.SUCCEEDED, 1)
    table = JobTable(jobs, database)
    fired = stored_schedules.fire(
        database, "a", list(jobs), lambda row, now, connection: plan(table, row, now)
    )
    read: dict[str, list[object]] = {}
    for claim in sorted(fired.result.won, key=lambda claim: claim.period):
        assert writes.start(database, claim) is model.Started.STARTED
        context = run_context(claim, node="a", database=database, log=structlog.get_logger())
        previous = context.previous
        read.setdefault(claim.job, []).append(previous and (previous.period, previous.checkpoint))
        context.checkpoint({"job": claim.job})
        assert writes.finish(database, claim, RunStatus.SUCCEEDED, 1)
    assert read == {
        f"@{key}": [None]
        + [(start + timedelta(seconds=seconds), {"job": f"@{key}"}) for seconds in offsets[:-1]]
        for key, offsets in periods.items()
    }
