"""The claim is the guarantee: many contenders, one winner, one row — on both backends."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from scheduler.model import Claim, Due, Started
from scheduler.states import RunStatus
from scheduler.store import claims, queries, renewals, writes
from scheduler.store.database import Database, open_database
from tests.sql import began_at

PERIOD = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _race(database_url: str, contenders: int, due: list[Due]) -> list[list[Claim]]:
    """Each contender has its own engine (its own connections) and starts at once."""
    barrier = threading.Barrier(contenders)
    results: list[list[Claim]] = [[] for _ in range(contenders)]

    def contend(index: int) -> None:
        database = open_database(database_url)
        try:
            barrier.wait()
            results[index] = claims.claim(database, due, f"node-{index}").won
        finally:
            database.dispose()

    threads = [threading.Thread(target=contend, args=(index,)) for index in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def _count(database: Database) -> int:
    with database.transaction() as connection:
        return int(connection.execute("SELECT count(*) FROM scheduler_runs").scalar())


def test_one_of_many_contenders_wins_a_period(database_url: str, database: Database) -> None:
    results = _race(database_url, 12, [Due("billing", PERIOD, 30)])
    winners = [index for index, won in enumerate(results) if won]
    assert len(winners) == 1
    row = queries.run_mapping(database, "billing", PERIOD)
    assert row is not None
    assert row["holder"] == f"node-{winners[0]}"
    assert row["status"] == RunStatus.CLAIMED
    assert row["attempt"] == 1
    assert _count(database) == 1


def test_batch_claims_split_without_overlap(database_url: str, database: Database) -> None:
    due = [Due(f"job-{n}", PERIOD + timedelta(seconds=n % 7), 30) for n in range(600)]
    results = _race(database_url, 3, due)
    keys = [(claim.job, claim.period) for won in results for claim in won]
    assert len(keys) == len(set(keys)) == 600
    assert _count(database) == 600


def test_claim_sets_a_lease_on_the_database_clock(database: Database) -> None:
    before = datetime.now(UTC)
    (claim,) = claims.claim(database, [Due("billing", PERIOD, 45)], "node-a").won
    row = queries.run_mapping(database, "billing", PERIOD)
    assert row is not None
    expires = row["lease_expires_at"]
    assert isinstance(expires, datetime)
    assert timedelta(seconds=40) < expires - before < timedelta(seconds=50)
    assert claim.lease_seconds == 45


def test_writes_are_fenced_on_attempt_and_holder(database: Database) -> None:
    (claim,) = claims.claim(database, [Due("billing", PERIOD, 30)], "node-a").won
    assert writes.start(database, replace(claim, holder="node-b")) is Started.LOST
    assert writes.start(database, replace(claim, attempt=2)) is Started.LOST
    assert writes.start(database, claim) is Started.STARTED
    assert not writes.finish(database, replace(claim, holder="node-b"), RunStatus.SUCCEEDED, 5)
    assert writes.finish(database, claim, RunStatus.SUCCEEDED, 5)
    # A finished run is no longer anyone's to write.
    assert not writes.finish(database, claim, RunStatus.FAILED, 5)
    row = queries.run_mapping(database, "billing", PERIOD)
    assert row is not None
    assert row["status"] == RunStatus.SUCCEEDED
    assert row["duration_ms"] == 5
    assert row["lease_expires_at"] is None


def test_renewal_returns_only_runs_still_held(database: Database) -> None:
    dues = [Due("a", PERIOD, 30), Due("b", PERIOD, 60)]
    first, second = claims.claim(database, dues, "node-a").won
    writes.finish(database, second, RunStatus.SUCCEEDED, 1)
    assert [row.key for row in renewals.renew_leases(database, "node-a")] == [first.key]
    assert renewals.renew_leases(database, "node-b") == []


def test_a_backlog_claimed_in_one_batch_is_judged_period_by_period(database: Database) -> None:
    """Periods that piled up while claims failed (the database was away, a node stalled)
    all belong to the job; none is skipped because of its own neighbours in the batch.
    They still run one at a time: the newer ones wait for the older ones to start."""
    backlog = [Due("sync", PERIOD + timedelta(seconds=n), 30) for n in range(5)]
    result = claims.claim(database, backlog, "node-a")
    assert sorted(claim.period for claim in result.won) == [item.period for item in backlog]
    assert result.skipped == []
    oldest, second, *_ = sorted(result.won, key=lambda claim: claim.period)
    assert writes.start(database, second, in_turn=True) is Started.WAIT
    assert writes.start(database, oldest, in_turn=True) is Started.STARTED
    assert writes.start(database, second, in_turn=True) is Started.WAIT


def test_a_backlog_behind_a_running_period_is_skipped(database: Database) -> None:
    """Overlap is judged against runs outside the batch: behind a period whose body was
    running when they fell due and still runs, each period of the backlog is skipped, as
    any single period would be."""
    (running,) = claims.claim(database, [Due("sync", PERIOD, 30)], "node-a").won
    assert writes.start(database, running) is Started.STARTED
    began_at(database, running.id, PERIOD)
    backlog = [Due("sync", PERIOD + timedelta(seconds=n), 30) for n in range(1, 4)]
    result = claims.claim(database, backlog, "node-b")
    assert result.won == []
    assert len(result.skipped) == 3


def test_a_period_ahead_of_the_database_clock_is_not_claimed(database: Database) -> None:
    """A node whose clock runs ahead must not claim (or skip) a period that has not come
    yet by the database clock: it is left alone and reported back as early."""
    ahead = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    result = claims.claim(database, [Due("sync", ahead, 30), Due("sync", PERIOD, 30)], "node-a")
    assert [claim.period for claim in result.won] == [PERIOD]
    assert [item.period for item in result.early] == [ahead]
    assert queries.run_mapping(database, "sync", ahead) is None


def test_a_period_claimed_after_a_later_one_is_not_skipped_for_it(database: Database) -> None:
    """Peers whose views of who is alive differ for a second (a node joins, one hangs)
    can leave period P unclaimed on time while P+1 is claimed on time; P is then claimed
    as a leftover, after P+1. P fell due before P+1 existed: a later period does not
    occupy it. It is claimed, and runs before P+1 (oldest first)."""
    (later,) = claims.claim(
        database, [Due("sync", PERIOD + timedelta(seconds=1), 30)], "node-a"
    ).won
    result = claims.claim(database, [Due("sync", PERIOD, 30)], "node-b")
    assert result.skipped == [], "the earlier period was skipped behind a later one"
    (earlier,) = result.won
    assert writes.start(database, later, in_turn=True) is Started.WAIT
    assert writes.start(database, earlier, in_turn=True) is Started.STARTED
    assert writes.start(database, later, in_turn=True) is Started.WAIT
    writes.finish(database, earlier, RunStatus.SUCCEEDED, 1)
    assert writes.start(database, later, in_turn=True) is Started.STARTED


def test_a_period_claimed_while_a_later_one_runs_waits_for_it(database: Database) -> None:
    """The leftover P claimed while P+1 already runs: still not skipped, and it waits
    until P+1 is done, so the job never runs twice at once."""
    (later,) = claims.claim(
        database, [Due("sync", PERIOD + timedelta(seconds=1), 30)], "node-a"
    ).won
    assert writes.start(database, later, in_turn=True) is Started.STARTED
    result = claims.claim(database, [Due("sync", PERIOD, 30)], "node-b")
    assert result.skipped == [], "the earlier period was skipped behind a later one"
    (earlier,) = result.won
    assert writes.start(database, earlier, in_turn=True) is Started.WAIT
    writes.finish(database, later, RunStatus.SUCCEEDED, 1)
    assert writes.start(database, earlier, in_turn=True) is Started.STARTED
    began_at(database, earlier.id, PERIOD + timedelta(seconds=1))
    # And the period after both is skipped while P runs, as any period due meanwhile.
    after = claims.claim(database, [Due("sync", PERIOD + timedelta(seconds=2), 30)], "node-a")
    assert after.won == []
    assert len(after.skipped) == 1
