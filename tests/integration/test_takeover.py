"""Overlap in the claim, queue starts, takeover of expired and failed runs, the late writer."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from scheduler import model
from scheduler.model import Due, Failure, Finish, Started, StartRequest
from scheduler.states import Origin, Reason, RunStatus
from scheduler.store import claims, queries, renewals, takeover, writes
from scheduler.store.database import Database
from tests.sql import began_at, rows, update

PERIOD = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NEXT = PERIOD + timedelta(seconds=1)
AFTER = PERIOD + timedelta(seconds=2)


def _expire(database: Database, run_id: str) -> None:
    """Age a lease into the past, as if its node had stopped renewing it."""
    expired = datetime.now(UTC) - timedelta(seconds=1)
    with database.transaction() as connection:
        update(connection, "scheduler_runs", {"id": run_id}, lease_expires_at=expired)


def _attempt_rows(database: Database, run_id: str) -> list[dict[str, object]]:
    return rows(database, "scheduler_attempts", order_by="attempt", run_id=run_id)


def test_skip_records_the_overlapping_period_as_skipped(database: Database) -> None:
    (first,) = claims.claim(database, [Due("sync", PERIOD, 30)], "node-a").won
    assert writes.start(database, first) is Started.STARTED
    began_at(database, first.id, PERIOD)
    result = claims.claim(database, [Due("sync", NEXT, 30)], "node-b")
    assert result.won == []
    (skipped,) = result.skipped
    row = queries.run_mapping(database, "sync", NEXT)
    assert row is not None
    assert (row["status"], row["reason"]) == (RunStatus.SKIPPED, Reason.OVERLAP)
    assert row["lease_expires_at"] is None
    assert skipped.period == NEXT
    writes.finish(database, first, RunStatus.SUCCEEDED, 10)
    assert claims.claim(database, [Due("sync", AFTER, 30)], "node-b").won


def test_allow_claims_alongside_a_running_period(database: Database) -> None:
    claims.claim(database, [Due("sync", PERIOD, 30, overlap_limit=None)], "node-a")
    result = claims.claim(database, [Due("sync", NEXT, 30, overlap_limit=None)], "node-b")
    assert len(result.won) == 1


def test_queue_holds_one_waiting_period_and_starts_it_after_the_first(database: Database) -> None:
    (first,) = claims.claim(database, [Due("sync", PERIOD, 30, overlap_limit=2)], "node-a").won
    assert writes.start(database, first, in_turn=True) is Started.STARTED
    began_at(database, first.id, PERIOD)
    (waiting,) = claims.claim(database, [Due("sync", NEXT, 30, overlap_limit=2)], "node-b").won
    assert claims.claim(database, [Due("sync", AFTER, 30, overlap_limit=2)], "node-c").skipped
    assert writes.start(database, waiting, in_turn=True) is Started.WAIT
    writes.finish(database, first, RunStatus.SUCCEEDED, 10)
    assert writes.start(database, waiting, in_turn=True) is Started.STARTED


def test_an_expired_run_is_retaken_once_and_the_late_writer_refused(database: Database) -> None:
    (claim,) = claims.claim(database, [Due("sync", PERIOD, 30)], "node-a").won
    writes.start(database, claim)
    assert takeover.find_stale(database, ["sync"], 10) == []
    _expire(database, claim.id)
    (stale,) = takeover.find_stale(database, ["sync"], 10)
    assert stale.expired
    retaken = takeover.retake(database, stale, "node-b")
    assert retaken is not None
    assert (retaken.attempt, retaken.holder) == (2, "node-b")
    assert takeover.retake(database, stale, "node-c") is None, "a stale read must not win twice"
    # The old holder comes back and tries to record its outcome: refused.
    assert not writes.finish(database, claim, RunStatus.SUCCEEDED, 5)
    assert renewals.renew_leases(database, "node-a") == []
    assert writes.start(database, retaken) is Started.STARTED
    assert writes.finish(database, retaken, RunStatus.SUCCEEDED, 7)
    row = queries.run_mapping(database, "sync", PERIOD)
    assert row is not None
    assert (row["status"], row["attempt"], row["holder"]) == (RunStatus.SUCCEEDED, 2, "node-b")
    (dead,) = _attempt_rows(database, claim.id)
    assert (dead["attempt"], dead["status"], dead["reason"], dead["node"]) == (
        1,
        RunStatus.ABANDONED,
        Reason.LEASE_EXPIRED,
        "node-a",
    )


def test_a_failed_run_waits_for_its_retry_time(database: Database) -> None:
    (claim,) = claims.claim(database, [Due("sync", PERIOD, 30)], "node-a").won
    writes.start(database, claim)
    failure = Failure("builtins.ValueError", "bad row 7", "Traceback …")
    writes.finish(database, claim, RunStatus.FAILED, 3, failure=failure, retry_in=0.3)
    assert takeover.find_stale(database, ["sync"], 10) == []
    waited = takeover.seconds_until_recovery(database, ["sync"])
    assert waited is not None
    assert 0 < waited <= 0.3
    time.sleep(waited + 0.05)
    (stale,) = takeover.find_stale(database, ["sync"], 10)
    assert not stale.expired
    retry = takeover.retake(database, stale, "node-b", Origin.SCHEDULE)
    assert retry is not None
    assert retry.attempt == 2
    (first,) = _attempt_rows(database, claim.id)
    assert (first["status"], first["error_message"], first["node"]) == (
        RunStatus.FAILED,
        "bad row 7",
        "node-a",
    )
    row = queries.run_mapping(database, "sync", PERIOD)
    assert row is not None
    assert row["error_message"] is None
    assert row["retry_at"] is None


def test_giving_up_ends_an_expired_run_abandoned(database: Database) -> None:
    (claim,) = claims.claim(database, [Due("sync", PERIOD, 30)], "node-a").won
    _expire(database, claim.id)
    (stale,) = takeover.find_stale(database, ["sync"], 10)
    assert takeover.give_up(database, stale)
    row = queries.run_mapping(database, "sync", PERIOD)
    assert row is not None
    assert (row["status"], row["reason"]) == (RunStatus.ABANDONED, Reason.LEASE_EXPIRED)
    assert takeover.find_stale(database, ["sync"], 10) == []


def test_lock_keys_are_stable() -> None:
    assert model.lock_key("billing") == model.lock_key("billing")
    assert model.lock_key("billing") != model.lock_key("billing2")
    assert -(2**63) <= model.lock_key("x") < 2**63


def test_a_retaken_older_period_waits_for_a_newer_one_that_runs(database: Database) -> None:
    """Given back at shutdown, period 1 is retaken while period 2 already runs: it waits."""
    (older,) = claims.claim(database, [Due("sync", PERIOD, 30)], "node-a").won
    writes.finish(database, older, RunStatus.ABANDONED, None, reason=Reason.SHUTDOWN, retry_in=0)
    (newer,) = claims.claim(database, [Due("sync", NEXT, 30)], "node-b").won
    assert writes.start(database, newer, in_turn=True) is Started.STARTED
    (stale,) = takeover.find_stale(database, ["sync"], 10)
    retaken = takeover.retake(database, stale, "node-c")
    assert retaken is not None
    assert writes.start(database, retaken, in_turn=True) is Started.WAIT
    writes.finish(database, newer, RunStatus.SUCCEEDED, 5)
    assert writes.start(database, retaken, in_turn=True) is Started.STARTED


def test_stale_runs_of_jobs_this_node_does_not_run_are_paged_past(database: Database) -> None:
    """The recovery loop sends no job names: other nodes' stale runs must not hide ours."""
    strangers = [Due(f"other-{n}", PERIOD, 30) for n in range(5)]
    ours = [Due("sync", NEXT, 30)]
    for claim in claims.claim(database, strangers + ours, "node-a").won:
        _expire(database, claim.id)
    (stale,) = takeover.find_stale(database, {"sync"}, 2)
    assert (stale.job, stale.period) == ("sync", NEXT)
    assert len(takeover.find_stale(database, {f"other-{n}" for n in range(5)}, 2)) == 2


def test_the_recovery_deadline_for_every_job_ignores_deadlines_already_past(
    database: Database,
) -> None:
    (expired,) = claims.claim(database, [Due("gone", PERIOD, 30)], "node-a").won
    _expire(database, expired.id)
    assert takeover.seconds_until_recovery(database, None) is None
    claims.claim(database, [Due("sync", PERIOD, 30)], "node-a")
    waited = takeover.seconds_until_recovery(database, None)
    assert waited is not None
    assert 25 < waited <= 30


def test_one_batch_fences_each_row_on_its_own(database: Database) -> None:
    """A batch of outcomes and starts: a refused row does not refuse its neighbours."""
    held, other = claims.claim(database, [Due("a", PERIOD, 30), Due("b", PERIOD, 30)], "n").won
    (waiting,) = claims.claim(database, [Due("c", PERIOD, 30)], "n").won
    stale = replace(other, attempt=2)
    applied, started = writes.record(
        database,
        [Finish(held, RunStatus.SUCCEEDED, 4), Finish(stale, RunStatus.FAILED, 4)],
        [StartRequest(waiting), StartRequest(replace(waiting, holder="someone-else"))],
    )
    assert (applied, started) == ([True, False], [Started.STARTED, Started.LOST])
    statuses = {job: queries.run_mapping(database, job, PERIOD) for job in "abc"}
    assert {job: row["status"] for job, row in statuses.items() if row} == {
        "a": RunStatus.SUCCEEDED,
        "b": RunStatus.CLAIMED,
        "c": RunStatus.RUNNING,
    }


def test_one_batch_starts_the_oldest_queued_period_and_holds_the_next(database: Database) -> None:
    due = [Due("sync", period, 30, overlap_limit=None) for period in (PERIOD, NEXT)]
    older, newer = sorted(claims.claim(database, due, "n").won, key=lambda claim: claim.period)
    _, started = writes.record(
        database, [], [StartRequest(newer, in_turn=True), StartRequest(older, True)]
    )
    assert started == [Started.WAIT, Started.STARTED]
    # The older one ends and the newer one starts in the same transaction.
    applied, started = writes.record(
        database,
        [Finish(older, RunStatus.SUCCEEDED, 9)],
        [StartRequest(newer, in_turn=True)],
    )
    assert (applied, started) == ([True], [Started.STARTED])


def test_a_lease_renewed_after_it_was_read_as_expired_is_not_retaken(database: Database) -> None:
    """Recovery read the lease as expired; before its takeover lands, the holder's
    renewal does. The takeover must look at the lease again, or the holder would carry
    on believing its renewal and the new attempt would run beside it."""
    (claim,) = claims.claim(database, [Due("sync", PERIOD, 30)], "node-a").won
    writes.start(database, claim)
    _expire(database, claim.id)
    (stale,) = takeover.find_stale(database, ["sync"], 10)
    renewed = datetime.now(UTC) + timedelta(seconds=30)
    with database.transaction() as connection:
        update(connection, "scheduler_runs", {"id": claim.id}, lease_expires_at=renewed)
    assert takeover.retake(database, stale, "node-b") is None
    row = queries.run_mapping(database, "sync", PERIOD)
    assert row is not None
    assert (row["attempt"], row["holder"]) == (1, "node-a")


def test_an_expired_lease_cannot_be_renewed(database: Database) -> None:
    """Once the lease has run out by the database clock, the run is anyone's: the old
    holder's renewal is refused, so that it learns it lost, whoever retakes it."""
    (claim,) = claims.claim(database, [Due("sync", PERIOD, 30)], "node-a").won
    writes.start(database, claim)
    _expire(database, claim.id)
    assert renewals.renew_leases(database, "node-a") == []
