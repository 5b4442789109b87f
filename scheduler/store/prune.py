"""Retention: delete old runs (with their attempts) and old done items, in small batches.

Each batch is its own short transaction, so nodes claiming and finishing runs never
wait long behind a prune. What is deleted, and what never is:

- a run whose period is older than the cutoff and that is over (not claimed or
  running, no retry pending), except each job's newest run and newest success
  (`scheduler check` and the metrics read those) and runs after the job's catch-up
  watermark (catch-up would take the gap for a missed period);
- an item that is `done`, was finished before the cutoff, and whose run is gone (deleted
  here, or long before): a kept run keeps its items, so that a rerun of it does not
  handle them again. Claimed items are kept however old: their effect is unknown until
  an operator looks;
- an alert event settled (delivered, failed, unrouted) before the cutoff, except that
  of an item still stuck.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, and_, delete, exists, func, or_, select, tuple_

from scheduler.states import RunStatus
from scheduler.store import deliveries as alert_events
from scheduler.store.database import Database
from scheduler.store.fence import ACTIVE
from scheduler.store.items import ItemState
from scheduler.store.schema import attempts, items, jobs, runs

BATCH = 1000
_newer = runs.alias("newer")


@dataclass(frozen=True)
class Pruned:
    """What a prune deleted (or, dry, would delete) and the stuck items it kept."""

    cutoff: datetime
    runs: int
    attempts: int
    items: int
    stuck_kept: int
    events: int = 0


def cutoff_for(database: Database, older_than: timedelta) -> datetime:
    """The cutoff by the database clock."""
    return database.read_clock() - older_than


def _prunable_run(cutoff: datetime) -> ColumnElement[bool]:
    later = and_(_newer.c.job == runs.c.job, _newer.c.period > runs.c.period)
    succeeded = RunStatus.SUCCEEDED.value
    return and_(
        runs.c.period < cutoff,
        runs.c.status.not_in(ACTIVE),
        runs.c.retry_at.is_(None),
        # Each job keeps its newest run and its newest success.
        exists().where(later),
        or_(runs.c.status != succeeded, exists().where(later, _newer.c.status == succeeded)),
        # Catch-up has moved past it (or the job is not registered to be caught up).
        ~exists().where(
            jobs.c.name == runs.c.job,
            or_(jobs.c.caught_up_to.is_(None), jobs.c.caught_up_to < runs.c.period),
        ),
    )


def _prunable_item(cutoff: datetime) -> ColumnElement[bool]:
    return and_(
        items.c.state == ItemState.DONE.value,
        items.c.done_at < cutoff,
        ~exists().where(runs.c.id == items.c.run_id),
    )


def prune(
    database: Database,
    cutoff: datetime,
    *,
    dry_run: bool = False,
    batch: int = BATCH,
    keep_going: Callable[[], bool] = lambda: True,
) -> Pruned:
    """Delete what the retention allows, `batch` rows a transaction; with `dry_run`, count.

    `keep_going` is asked between batches, so a stopping node leaves promptly; what
    is left is deleted by the next prune.
    """
    if dry_run:
        return _count(database, cutoff)
    deleted_runs = deleted_attempts = deleted_items = 0
    while keep_going():
        found, run_count, attempt_count = _delete_runs(database, cutoff, batch)
        deleted_runs, deleted_attempts = deleted_runs + run_count, deleted_attempts + attempt_count
        if found < batch:
            break
    while keep_going():
        count = _delete_items(database, cutoff, batch)
        deleted_items += count
        if count < batch:
            break
    deleted_events = 0
    while keep_going():
        count = alert_events.prune(database, cutoff, batch)
        deleted_events += count
        if count < batch:
            break
    stuck = _stuck(database, cutoff)
    return Pruned(cutoff, deleted_runs, deleted_attempts, deleted_items, stuck, deleted_events)


def _delete_runs(database: Database, cutoff: datetime, batch: int) -> tuple[int, int, int]:
    """One batch of runs, oldest first, then their attempts: (found, runs, attempts)."""
    chosen = select(runs.c.id).where(_prunable_run(cutoff)).order_by(runs.c.period).limit(batch)
    with database.transaction() as connection:
        ids = list(connection.execute(chosen).scalars())
        if not ids:
            return 0, 0, 0
        # Deleted under the same conditions: a row that changed meanwhile stays.
        gone = list(
            connection.execute(
                delete(runs).where(runs.c.id.in_(ids), _prunable_run(cutoff)).returning(runs.c.id)
            ).scalars()
        )
        dropped = connection.execute(delete(attempts).where(attempts.c.run_id.in_(gone)))
    return len(ids), len(gone), dropped.rowcount


def _delete_items(database: Database, cutoff: datetime, batch: int) -> int:
    chosen = select(items.c.job, items.c.key).where(_prunable_item(cutoff)).limit(batch)
    statement = delete(items).where(
        tuple_(items.c.job, items.c.key).in_(chosen), _prunable_item(cutoff)
    )
    with database.transaction() as connection:
        return connection.execute(statement).rowcount


def _stuck(database: Database, cutoff: datetime) -> int:
    statement = (
        select(func.count())
        .select_from(items)
        .where(items.c.state == ItemState.CLAIMED.value, items.c.claimed_at < cutoff)
    )
    with database.transaction() as connection:
        return int(connection.execute(statement).scalar_one())


def _count(database: Database, cutoff: datetime) -> Pruned:
    doomed = select(runs.c.id).where(_prunable_run(cutoff)).scalar_subquery()
    with database.transaction() as connection:
        counts = [
            connection.execute(
                select(func.count()).select_from(table).where(condition)
            ).scalar_one()
            for table, condition in (
                (runs, _prunable_run(cutoff)),
                (attempts, attempts.c.run_id.in_(doomed)),
                (items, _prunable_item(cutoff)),
            )
        ]
    events = alert_events.prune(database, cutoff, 0, dry_run=True)
    stuck = _stuck(database, cutoff)
    return Pruned(cutoff, int(counts[0]), int(counts[1]), int(counts[2]), stuck, events)
