"""A pool's starts on both databases: the limits admit runs in order, a full pool holds
the rest back as `waiting (pool)`, a per-key cap does not let one key take the pool nor
hold back other keys behind it, a dead holder's slot frees when its lease ends, and an
operator's limit is in force at the next start."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduler.model import Claim, Due, QueueRequest, Started, StartRequest
from scheduler.policy import Pool
from scheduler.states import Reason, RunStatus
from scheduler.store import claims, concurrency, queries
from scheduler.store.database import Database
from scheduler.store.faults import StoreRejectedError
from tests.sql import update

BASE = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
REPORTS = Pool("reports", limit=2, per_key=1)


def _claim(database: Database, job: str, second: int, holder: str = "node-a") -> Claim:
    (claim,) = claims.claim(database, [Due(job, BASE + timedelta(seconds=second), 30)], holder).won
    return claim


def _request(claim: Claim, key: str | None = None, pool: Pool = REPORTS) -> StartRequest:
    return StartRequest(
        claim,
        in_turn=False,
        pool=pool.name,
        pool_key=key,
        pool_limit=pool.limit,
        pool_per_key=pool.per_key,
    )


def _row(database: Database, claim: Claim) -> dict[str, object]:
    row = queries.run_mapping(database, claim.job, claim.period)
    assert row is not None
    return dict(row)


def test_a_full_pool_holds_runs_back_in_order_and_admits_them_as_slots_free(
    database: Database,
) -> None:
    concurrency.declare(database, [Pool("reports", limit=2)])
    runs = [_claim(database, f"report-{n}", n) for n in range(4)]
    answers = concurrency.start(database, [_request(claim) for claim in reversed(runs)])
    # Oldest first whatever the batch's order: the two earliest start.
    assert list(reversed(answers)) == [
        Started.STARTED,
        Started.STARTED,
        Started.POOLED,
        Started.POOLED,
    ]
    waiting = _row(database, runs[2])
    assert (waiting["status"], waiting["reason"], waiting["pool"]) == (
        RunStatus.CLAIMED,
        Reason.POOL,
        "reports",
    )
    # The later waiting run asks first: the earlier one is ahead of it, and still waits.
    assert concurrency.start(database, [_request(runs[3])]) == [Started.POOLED]
    with database.transaction() as connection:
        update(
            connection,
            "scheduler_runs",
            {"id": runs[0].id},
            status=RunStatus.SUCCEEDED.value,
            lease_expires_at=None,
        )
    assert concurrency.start(database, [_request(runs[3])]) == [Started.POOLED]
    assert concurrency.start(database, [_request(runs[2])]) == [Started.STARTED]
    started = _row(database, runs[2])
    assert (started["status"], started["reason"]) == (RunStatus.RUNNING, None)
    # A start tried again after its reply was lost finds it started.
    assert concurrency.start(database, [_request(runs[2])]) == [Started.STARTED]
    state = {pool.name: pool for pool in concurrency.states(database)}["reports"]
    assert (state.limit, state.running, state.waiting) == (2, 2, 1)


def test_a_per_key_cap_keeps_one_key_from_the_pool_and_holds_no_other_key_back(
    database: Database,
) -> None:
    concurrency.declare(database, [REPORTS])
    first = _claim(database, "tenant-a-1", 0)
    second = _claim(database, "tenant-a-2", 1)
    other = _claim(database, "tenant-b-1", 2)
    answers = concurrency.start(
        database, [_request(first, "a"), _request(second, "a"), _request(other, "b")]
    )
    # Tenant a's second run waits for its key, not for the pool: tenant b's, behind it
    # in order, takes the pool's second slot.
    assert answers == [Started.STARTED, Started.POOLED, Started.STARTED]


def test_a_dead_holders_slot_frees_when_its_lease_ends(database: Database) -> None:
    concurrency.declare(database, [Pool("reports", limit=1)])
    held = _claim(database, "report-0", 0, holder="node-dead")
    assert concurrency.start(database, [_request(held, pool=Pool("reports", 1))]) == [
        Started.STARTED
    ]
    later = _claim(database, "report-1", 1)
    assert concurrency.start(database, [_request(later, pool=Pool("reports", 1))]) == [
        Started.POOLED
    ]
    # Recovery's judgement ends the dead holder's lease: the slot is free.
    with database.transaction() as connection:
        past = datetime.now(UTC) - timedelta(seconds=1)
        update(connection, "scheduler_runs", {"id": held.id}, lease_expires_at=past)
    assert concurrency.start(database, [_request(later, pool=Pool("reports", 1))]) == [
        Started.STARTED
    ]


def test_an_operators_limit_is_in_force_at_the_next_start_until_reset(
    database: Database,
) -> None:
    concurrency.declare(database, [Pool("reports", limit=1)])
    runs = [_claim(database, f"report-{n}", n) for n in range(3)]
    assert concurrency.start(database, [_request(runs[0])]) == [Started.STARTED]
    assert concurrency.start(database, [_request(runs[1])]) == [Started.POOLED]
    concurrency.change(database, "reports", limit=2, per_key=None, by="ops")
    # A registration of the code's limit does not undo the operator's.
    concurrency.declare(database, [Pool("reports", limit=1)])
    assert concurrency.start(database, [_request(runs[1])]) == [Started.STARTED]
    assert concurrency.start(database, [_request(runs[2])]) == [Started.POOLED]
    (state,) = concurrency.states(database)
    assert (state.limit, state.declared_limit, state.changed_by, state.overridden) == (
        2,
        1,
        "ops",
        True,
    )
    concurrency.reset(database, "reports", by="ops")
    (state,) = concurrency.states(database)
    assert (state.limit, state.running, state.waiting, state.overridden) == (1, 2, 1, False)
    with pytest.raises(StoreRejectedError, match="pool 'nightly': name: no such pool"):
        concurrency.change(database, "nightly", limit=3, per_key=None, by="ops")


def test_a_start_not_this_attempts_any_more_is_lost(database: Database) -> None:
    concurrency.declare(database, [REPORTS])
    claim = _claim(database, "report-0", 0)
    stale = Claim(**{**claim.__dict__, "attempt": claim.attempt + 1})
    assert concurrency.start(database, [_request(stale)]) == [Started.LOST]


def test_a_remote_run_is_queued_as_its_pool_admits_and_holds_its_slot_until_its_deadline(
    database: Database,
) -> None:
    concurrency.declare(database, [Pool("remote", limit=1)])
    pool = Pool("remote", limit=1)
    sent = _claim(database, "remote-0", 0)
    later = _claim(database, "remote-1", 1)
    queues = {sent.id: QueueRequest(sent, "celery", deadline_s=30)}
    assert concurrency.start(database, [_request(sent, pool=pool)], queues) == [Started.STARTED]
    queued = _row(database, sent)
    assert (queued["status"], queued["queue"], queued["pool"]) == ("queued", "celery", "remote")
    # Queued, not yet taken by a worker: it holds the pool's one slot.
    later_queues = {later.id: QueueRequest(later, "celery", deadline_s=30)}
    assert concurrency.start(database, [_request(later, pool=pool)], later_queues) == [
        Started.POOLED
    ]
    # Its message's deadline passed with no worker: the slot is free.
    with database.transaction() as connection:
        past = datetime.now(UTC) - timedelta(seconds=1)
        update(connection, "scheduler_runs", {"id": sent.id}, lease_expires_at=past)
    assert concurrency.start(database, [_request(later, pool=pool)], later_queues) == [
        Started.STARTED
    ]
