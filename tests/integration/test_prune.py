"""Retention on real databases: old history goes in batches; recent history, each job's
newest run and success, unfinished runs and every claimed item stay."""

from __future__ import annotations

from datetime import timedelta

from scheduler.store import prune
from scheduler.store.database import Database
from tests.integration.seed import add_item, add_run, rows
from tests.retention_seed import RETENTION, seed


def test_prune_deletes_only_what_the_retention_allows(database: Database) -> None:
    seeded = seed(database)
    cutoff = prune.cutoff_for(database, RETENTION)

    counted = prune.prune(database, cutoff, dry_run=True)
    assert (counted.runs, counted.attempts, counted.items, counted.stuck_kept) == (
        len(seeded.doomed_runs),
        seeded.doomed_attempts,
        len(seeded.doomed_items),
        1,
    )
    listed = {row["id"] for row in rows(database, "scheduler_runs")}
    assert listed == seeded.doomed_runs | seeded.kept_runs

    # A batch of two rows a transaction, so the loops go round several times.
    done = prune.prune(database, cutoff, batch=2)
    assert (done.runs, done.attempts, done.items, done.stuck_kept) == (
        counted.runs,
        counted.attempts,
        counted.items,
        1,
    )
    assert {row["id"] for row in rows(database, "scheduler_runs")} == seeded.kept_runs
    assert {row["key"] for row in rows(database, "scheduler_items")} == seeded.kept_items
    assert rows(database, "scheduler_attempts") == []

    again = prune.prune(database, cutoff)
    assert (again.runs, again.attempts, again.items) == (0, 0, 0)


def test_a_stopping_node_leaves_between_batches(database: Database) -> None:
    seeded = seed(database)
    asked: list[int] = []

    def keep_going() -> bool:
        asked.append(1)
        return len(asked) <= 1

    result = prune.prune(
        database, prune.cutoff_for(database, RETENTION), batch=1, keep_going=keep_going
    )
    assert result.runs == 1
    assert result.items == 0
    left = rows(database, "scheduler_runs")
    assert len(left) == len(seeded.kept_runs) + len(seeded.doomed_runs) - 1


def test_done_items_of_a_run_that_is_kept_stay_with_it(database: Database) -> None:
    """A failed run is kept (it is the job's newest); its done items are older than the
    cutoff. Deleting them would let a rerun of that run handle them a second time."""
    now = database.read_clock().replace(microsecond=0)
    period = now - timedelta(days=120)
    run_id = add_run(database, "invoicing", period, "failed", finished_at=period)
    add_item(database, "invoicing", "invoice:2026-10:42", period, run_id, state="done")
    prune.prune(database, prune.cutoff_for(database, RETENTION))
    assert {row["id"] for row in rows(database, "scheduler_runs")} == {run_id}
    assert [row["key"] for row in rows(database, "scheduler_items")] == ["invoice:2026-10:42"]
