"""`overlap="skip"` skips a period only behind a body of its job that was running when
the period fell due and still runs under a live holder (issue 41, item 3): a claimed,
unstarted run, a start whose holder never said its body began, a body that started
late, a body whose function returned, and a holder whose liveness lock went all make a
later period wait its turn instead."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from scheduler.model import Due, NodeIdentity, Started
from scheduler.states import Origin, Reason, RunStatus
from scheduler.store import claims, nodes, writes
from scheduler.store.database import Database
from tests.sql import began_at, rows, update

PERIOD = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NEXT = PERIOD + timedelta(seconds=1)


def _running(database: Database, holder: str = "node-a", *, since: datetime = PERIOD) -> str:
    (first,) = claims.claim(database, [Due("sync", PERIOD, 30)], holder).won
    assert writes.start(database, first) is Started.STARTED
    began_at(database, first.id, since)
    return first.id


def test_a_period_is_skipped_behind_a_body_running_when_it_fell_due(database: Database) -> None:
    _running(database)
    result = claims.claim(database, [Due("sync", NEXT, 30)], "node-b")
    assert result.won == []
    assert [result.reasons[claim.id] for claim in result.skipped] == [Reason.OVERLAP]


def test_a_start_not_said_to_have_begun_its_body_makes_a_later_period_wait(
    database: Database,
) -> None:
    """The start's commit is all the database has (its reply may have been lost and its
    holder killed before the call): the body may never run, so nothing skips behind it."""
    (first,) = claims.claim(database, [Due("sync", PERIOD, 30)], "node-a").won
    assert writes.start(database, first) is Started.STARTED
    with database.transaction() as connection:
        update(connection, "scheduler_runs", {"id": first.id}, started_at=PERIOD)
    result = claims.claim(database, [Due("sync", NEXT, 30)], "node-b")
    assert result.skipped == []
    assert len(result.won) == 1


def test_the_holders_word_that_the_body_began_is_what_makes_a_period_skip(
    database: Database,
) -> None:
    (first,) = claims.claim(database, [Due("sync", PERIOD, 30)], "node-a").won
    writes.began(database, [first])  # before its start: no word on a run not running
    assert rows(database, "scheduler_runs", id=first.id)[0]["began_at"] is None
    assert writes.start(database, first) is Started.STARTED
    writes.began(database, [replace(first, holder="node-b")])  # not its holder: refused
    assert rows(database, "scheduler_runs", id=first.id)[0]["began_at"] is None
    writes.began(database, [first])
    (row,) = rows(database, "scheduler_runs", id=first.id)
    assert row["began_at"] is not None
    assert row["began_at"] >= row["started_at"]
    began_at(database, first.id, PERIOD)  # dated back to the fixed period of the test
    result = claims.claim(database, [Due("sync", NEXT, 30)], "node-b")
    assert [result.reasons[claim.id] for claim in result.skipped] == [Reason.OVERLAP]


def test_a_claimed_unstarted_run_makes_a_later_period_wait(database: Database) -> None:
    """A backlog claimed during a stall: nothing of the job ran when the later period
    fell due, so it is claimed and waits its turn."""
    (first,) = claims.claim(database, [Due("sync", PERIOD, 30)], "node-a").won
    (later,) = claims.claim(database, [Due("sync", NEXT, 30)], "node-b").won
    assert writes.start(database, later, in_turn=True) is Started.WAIT
    assert writes.start(database, first, in_turn=True) is Started.STARTED
    writes.finish(database, first, RunStatus.SUCCEEDED, 5)
    assert writes.start(database, later, in_turn=True) is Started.STARTED


def test_a_body_that_started_after_the_period_fell_due_makes_it_wait(database: Database) -> None:
    """A peer's leftover claimed and started a second late: the period due meanwhile is
    not skipped behind the scheduler's own lateness."""
    _running(database, since=NEXT + timedelta(milliseconds=30))
    result = claims.claim(database, [Due("sync", NEXT, 30)], "node-b")
    assert result.skipped == []
    assert len(result.won) == 1


def test_a_body_whose_function_returned_makes_no_period_skip(database: Database) -> None:
    """Its holder knows the function returned while the outcome write is held up (a
    pooler restart): its own claim of the next period does not skip behind it."""
    first = _running(database)
    result = claims.claim(database, [Due("sync", NEXT, 30)], "node-a", returned=[first])
    assert result.skipped == []
    assert len(result.won) == 1


def test_queue_skips_only_behind_a_running_body_and_one_waiting(database: Database) -> None:
    (first,) = claims.claim(database, [Due("sync", PERIOD, 30, overlap_limit=2)], "node-a").won
    backlog = [Due("sync", PERIOD + timedelta(seconds=n), 30, overlap_limit=2) for n in (1, 2, 3)]
    for item in backlog:  # nothing runs: every period of a stall waits
        assert claims.claim(database, [item], "node-b").won
    assert writes.start(database, first, in_turn=True) is Started.STARTED
    began_at(database, first.id, PERIOD)
    later = Due("sync", PERIOD + timedelta(seconds=4), 30, overlap_limit=2)
    assert claims.claim(database, [later], "node-b").skipped


def _register(database: Database, node_id: str, key: int) -> None:
    identity = NodeIdentity(node_id, node_id, "host", 1, "test")
    nodes.register(database, identity, "digest", liveness_key=key)


@pytest.mark.postgres
def test_a_holder_whose_liveness_lock_went_is_in_doubt(postgres_url: str) -> None:
    """PostgreSQL: the holder's row names a liveness lock nobody holds (it died, or its
    session merely ended): its body makes no later period skip, which waits instead."""
    from scheduler.store.database import open_database  # noqa: PLC0415

    database = open_database(postgres_url)
    try:
        _register(database, "node-a", 424242)  # a lock nobody took
        _running(database, "node-a")
        result = claims.claim(database, [Due("sync", NEXT, 30)], "node-b")
        assert result.skipped == []
        assert len(result.won) == 1
    finally:
        database.dispose()


def test_behind_late_work_one_period_waits_and_the_next_is_skipped(database: Database) -> None:
    """A takeover's body (attempt 2) running when periods fall due: the first waits its
    turn behind it, the next is skipped, so no more pile up than the policy allows."""
    first = _running(database)
    with database.transaction() as connection:
        update(connection, "scheduler_runs", {"id": first}, attempt=2)
    assert claims.claim(database, [Due("sync", NEXT, 30)], "node-b").won
    after = claims.claim(database, [Due("sync", NEXT + timedelta(seconds=1), 30)], "node-b")
    assert after.won == []
    assert len(after.skipped) == 1


def test_behind_retaken_periods_waiting_their_turn_the_next_period_waits(
    database: Database,
) -> None:
    """A restarted node retook its predecessor's claims (attempt 2, waiting their turn)
    and caught up a period missed while it was down, one of them running: all of it is
    the scheduler's own late work, so the period due next waits behind it and only the
    one after that is skipped (the crash-loop acceptance test saw it skipped at once)."""
    backlog = [PERIOD - timedelta(seconds=n) for n in (4, 3, 2)]
    held = claims.claim(database, [Due("sync", p, 30, overlap_limit=None) for p in backlog], "a")
    (missed,) = claims.claim(
        database, [Due("sync", PERIOD, 30, overlap_limit=None, origin=Origin.CATCHUP)], "a"
    ).won
    with database.transaction() as connection:
        for claim in held.won:
            update(connection, "scheduler_runs", {"id": claim.id}, attempt=2)
    assert writes.start(database, replace(held.won[0], attempt=2), in_turn=True) is Started.STARTED
    began_at(database, held.won[0].id, backlog[0])
    assert missed.origin is Origin.CATCHUP
    on_time = claims.claim(database, [Due("sync", NEXT, 30)], "node-b")
    assert on_time.skipped == [], "skipped behind the scheduler's own late work"
    assert len(on_time.won) == 1
    after = claims.claim(database, [Due("sync", NEXT + timedelta(seconds=1), 30)], "node-b")
    assert after.won == []
    assert [after.reasons[claim.id] for claim in after.skipped] == [Reason.OVERLAP]
