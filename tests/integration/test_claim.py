"""The claim is the guarantee: many contenders, one winner, one row — on both backends."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select

from scheduler.states import RunStatus
from scheduler.store import runs
from scheduler.store.database import Database, open_database
from scheduler.store.runs import Claim, Due, Start
from scheduler.store.schema import runs as runs_table

PERIOD = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _race(database_url: str, contenders: int, due: list[Due]) -> list[list[Claim]]:
    """Each contender has its own engine (its own connections) and starts at once."""
    barrier = threading.Barrier(contenders)
    results: list[list[Claim]] = [[] for _ in range(contenders)]

    def contend(index: int) -> None:
        database = open_database(database_url)
        try:
            barrier.wait()
            results[index] = runs.claim(database, due, f"node-{index}").won
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
        return int(connection.execute(select(func.count()).select_from(runs_table)).scalar_one())


def test_one_of_many_contenders_wins_a_period(database_url: str, database: Database) -> None:
    results = _race(database_url, 12, [Due("billing", PERIOD, 30)])
    winners = [index for index, won in enumerate(results) if won]
    assert len(winners) == 1
    row = runs.get(database, "billing", PERIOD)
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
    (claim,) = runs.claim(database, [Due("billing", PERIOD, 45)], "node-a").won
    row = runs.get(database, "billing", PERIOD)
    assert row is not None
    expires = row["lease_expires_at"]
    assert isinstance(expires, datetime)
    assert timedelta(seconds=40) < expires - before < timedelta(seconds=50)
    assert claim.lease_seconds == 45


def test_writes_are_fenced_on_attempt_and_holder(database: Database) -> None:
    (claim,) = runs.claim(database, [Due("billing", PERIOD, 30)], "node-a").won
    assert runs.start(database, replace(claim, holder="node-b")) is Start.LOST
    assert runs.start(database, replace(claim, attempt=2)) is Start.LOST
    assert runs.start(database, claim) is Start.STARTED
    assert not runs.finish(database, replace(claim, holder="node-b"), RunStatus.SUCCEEDED, 5)
    assert runs.finish(database, claim, RunStatus.SUCCEEDED, 5)
    # A finished run is no longer anyone's to write.
    assert not runs.finish(database, claim, RunStatus.FAILED, 5)
    row = runs.get(database, "billing", PERIOD)
    assert row is not None
    assert row["status"] == RunStatus.SUCCEEDED
    assert row["duration_ms"] == 5
    assert row["lease_expires_at"] is None


def test_renewal_returns_only_runs_still_held(database: Database) -> None:
    first, second = runs.claim(database, [Due("a", PERIOD, 30), Due("b", PERIOD, 60)], "node-a").won
    runs.finish(database, second, RunStatus.SUCCEEDED, 1)
    assert runs.renew_leases(database, [first, second]) == {first.key}
    assert runs.renew_leases(database, [replace(first, attempt=2)]) == set()
