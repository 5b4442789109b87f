"""Handing runs to a task queue on a real database: a message starts its run once, under
its fence, and every stale copy is refused with what the row shows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduler.model import Claim, Due, Finish, QueueRequest, Refusal, Started
from scheduler.states import RunStatus
from scheduler.store import claims, handoff, renewals, takeover, writes
from scheduler.store.database import Database
from tests.sql import rows, update

PERIOD = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
NODE = "node-a"
WORKER = "w1@host/10/aaaa"


def _queued(database: Database, deadline: float = 60.0) -> Claim:
    (claim,) = claims.claim(database, [Due("sync", PERIOD, 30)], NODE).won
    assert handoff.queue(database, [QueueRequest(claim, "cron", deadline)]) == [Started.STARTED]
    return claim


def _row(database: Database, claim: Claim) -> dict[str, object]:
    (row,) = rows(database, "scheduler_runs", id=claim.id)
    return row


def _expire(database: Database, claim: Claim) -> None:
    expired = datetime.now(UTC) - timedelta(seconds=1)
    with database.transaction() as connection:
        update(connection, "scheduler_runs", {"id": claim.id}, lease_expires_at=expired)


def test_a_queued_run_is_started_once_by_the_worker_its_message_reached(
    database: Database,
) -> None:
    claim = _queued(database)
    row = _row(database, claim)
    assert (row["status"], row["queue"], row["holder"]) == ("queued", "cron", NODE)
    assert row["queued_at"] is not None
    assert row["started_at"] is None
    # Queueing again under the same fence (a reply that was lost) finds it done.
    assert handoff.queue(database, [QueueRequest(claim, "cron", 60)]) == [Started.STARTED]

    taken = handoff.take(database, claim, WORKER)
    assert taken.claim is not None
    assert (taken.claim.holder, taken.claim.attempt, taken.claim.lease_seconds) == (WORKER, 1, 30)
    assert taken.queued_ms is not None
    assert taken.queued_ms >= 0
    row = _row(database, claim)
    assert (row["status"], row["holder"], row["started_attempts"]) == ("running", WORKER, 1)
    # The same delivery, tried again, holds it still; a second copy does not.
    again = handoff.take(database, claim, WORKER)
    assert again.claim == taken.claim
    second = handoff.take(database, claim, "w2@host/11/bbbb")
    assert (second.claim, second.refusal) == (None, Refusal.TAKEN)
    # The worker renews and finishes it like a node, fenced on its own name.
    assert [held.key for held in renewals.renew_leases(database, WORKER)] == [claim.key]
    assert writes.finish(database, taken.claim, RunStatus.SUCCEEDED, 5)
    assert not writes.finish(database, claim, RunStatus.FAILED, 5), "the sender's fence is stale"
    late = handoff.take(database, claim, "w3@host/12/cccc")
    assert late.refusal is Refusal.SETTLED


def test_a_queued_run_is_not_renewed_by_its_sender_and_not_started_before_it_is_queued(
    database: Database,
) -> None:
    (claim,) = claims.claim(database, [Due("sync", PERIOD, 30)], NODE).won
    assert handoff.take(database, claim, WORKER).refusal is Refusal.UNSENT
    assert [held.key for held in renewals.renew_leases(database, NODE)] == [claim.key]
    handoff.queue(database, [QueueRequest(claim, "cron", 60)])
    assert renewals.renew_leases(database, NODE) == []


def test_past_its_deadline_the_run_is_retaken_and_the_old_message_is_stale(
    database: Database,
) -> None:
    claim = _queued(database, deadline=2)
    _expire(database, claim)
    assert handoff.take(database, claim, WORKER).refusal is Refusal.EXPIRED
    (stale,) = takeover.find_stale(database, ["sync"], 10)
    assert (stale.status, stale.expired) == (RunStatus.QUEUED, True)
    second = takeover.retake(database, stale, "node-b")
    assert second is not None
    assert second.attempt == 2
    row = _row(database, claim)
    assert (row["status"], row["queued_at"], row["queue"]) == ("claimed", None, None)
    (kept,) = rows(database, "scheduler_attempts")
    assert (kept["attempt"], kept["status"], kept["reason"]) == (1, "abandoned", "queue_expired")
    assert handoff.take(database, claim, WORKER).refusal is Refusal.SUPERSEDED
    assert handoff.queue(database, [QueueRequest(claim, "cron", 60)]) == [Started.LOST]
    assert handoff.queue(database, [QueueRequest(second, "cron", 60)]) == [Started.STARTED]
    assert handoff.take(database, second, WORKER).claim is not None


def test_a_message_that_was_not_sent_is_retaken_soon(database: Database) -> None:
    claim = _queued(database, deadline=600)
    assert handoff.unsend(database, claim, 0.0)
    assert takeover.find_stale(database, ["sync"], 10)[0].id == claim.id


def test_a_queued_run_occupies_its_job_for_a_period_that_waits_its_turn(
    database: Database,
) -> None:
    """overlap=queue: the next period is not queued while the previous one is queued."""
    first = _queued(database)
    later = PERIOD + timedelta(minutes=1)
    (second,) = claims.claim(database, [Due("sync", later, 30, overlap_limit=2)], NODE).won
    assert handoff.queue(database, [QueueRequest(second, "cron", 60, in_turn=True)]) == [
        Started.WAIT
    ]
    taken = handoff.take(database, first, WORKER)
    assert taken.claim is not None
    writes.record(database, [Finish(taken.claim, RunStatus.SUCCEEDED, 1)], [])
    assert handoff.queue(database, [QueueRequest(second, "cron", 60, in_turn=True)]) == [
        Started.STARTED
    ]
