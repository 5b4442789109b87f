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
  of an item still stuck;
- a job set (`store.job_sets`) last registered before the cutoff that no node heard
  from since then runs;
- a schedule created at run time deleted before the cutoff, once it has no run in
  hand; from then on its runs, newest too, are old runs of nothing: the next prune
  deletes them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduler.store import deliveries as alert_events
from scheduler.store import job_sets
from scheduler.store.connection import in_list
from scheduler.store.database import Database
from scheduler.store.fence import ACTIVE_SQL, RUNS
from scheduler.store.items import ITEMS
from scheduler.store.jobs import JOBS
from scheduler.store.takeover import ATTEMPTS

BATCH = 1000


@dataclass(frozen=True)
class Pruned:
    """What a prune deleted (or, dry, would delete) and the stuck items it kept."""

    cutoff: datetime
    runs: int
    attempts: int
    items: int
    stuck_kept: int
    events: int = 0
    schedules: int = 0


def cutoff_for(database: Database, older_than: timedelta) -> datetime:
    """The cutoff by the database clock."""
    return database.read_clock() - older_than


SCHEDULES = "scheduler_schedules"
# A run older than the cutoff (`:cutoff`) that retention may delete; `run` is the runs
# table's alias.
_PRUNABLE_RUN = f"""(run.period < :cutoff
    AND run.status NOT IN ({ACTIVE_SQL}) AND run.retry_at IS NULL
    -- Deferred by a catch-up budget: it waits for an operator's answer, however old.
    AND run.status <> 'deferred'
    AND ((run.job LIKE '@%' AND NOT EXISTS (
            SELECT 1 FROM {SCHEDULES} AS schedule WHERE schedule.key = substr(run.job, 2)))
    -- Each job keeps its newest run and its newest success.
    OR EXISTS (SELECT 1 FROM {RUNS} AS newer
                WHERE newer.job = run.job AND newer.period > run.period)
    AND (run.status <> 'succeeded'
         OR EXISTS (SELECT 1 FROM {RUNS} AS newer
                    WHERE newer.job = run.job AND newer.period > run.period
                      AND newer.status = 'succeeded'))
    -- Catch-up has moved past it (or the job is not registered to be caught up).
    AND NOT EXISTS (SELECT 1 FROM {JOBS} AS job
                    WHERE job.name = run.job
                      AND (job.caught_up_to IS NULL OR job.caught_up_to < run.period))))"""
# A done item from before the cutoff whose run is gone; `item` is the items table's alias.
_PRUNABLE_ITEM = f"""(item.state = 'done' AND item.done_at < :cutoff
    AND NOT EXISTS (SELECT 1 FROM {RUNS} AS run WHERE run.id = item.run_id))"""


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
    deleted_runs = deleted_attempts = deleted_items = deleted_schedules = 0
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
    while keep_going():
        count = _delete_schedules(database, cutoff, batch)
        deleted_schedules += count
        if count < batch:
            break
    stuck = _stuck(database, cutoff)
    if keep_going():
        job_sets.prune(database, cutoff)
    return Pruned(
        cutoff,
        deleted_runs,
        deleted_attempts,
        deleted_items,
        stuck,
        deleted_events,
        deleted_schedules,
    )


# A schedule deleted before the cutoff whose runs are all out of hand.
_PRUNABLE_SCHEDULE = f"""(schedule.deleted_at < :cutoff AND NOT EXISTS (
    SELECT 1 FROM {RUNS} AS run WHERE run.job = '@' || schedule.key AND run.live))"""


def _delete_schedules(database: Database, cutoff: datetime, batch: int) -> int:
    statement = f"""
        DELETE FROM {SCHEDULES} AS schedule WHERE schedule.key IN (
            SELECT schedule.key FROM {SCHEDULES} AS schedule WHERE {_PRUNABLE_SCHEDULE}
            LIMIT :batch) AND {_PRUNABLE_SCHEDULE}
    """
    with database.transaction() as connection:
        return connection.execute(statement, {"cutoff": cutoff, "batch": batch}).rowcount


def _delete_runs(database: Database, cutoff: datetime, batch: int) -> tuple[int, int, int]:
    """One batch of runs, oldest first, then their attempts: (found, runs, attempts)."""
    chosen = f"""
        SELECT run.id FROM {RUNS} AS run WHERE {_PRUNABLE_RUN}
        ORDER BY run.period LIMIT :batch
    """
    with database.transaction() as connection:
        ids = connection.execute(chosen, {"cutoff": cutoff, "batch": batch}).scalars()
        if not ids:
            return 0, 0, 0
        listed, parameters = in_list("id", ids)
        # Deleted under the same conditions: a row that changed meanwhile stays.
        gone = connection.execute(
            f"""DELETE FROM {RUNS} AS run WHERE run.id IN ({listed}) AND {_PRUNABLE_RUN}
                RETURNING id""",
            {**parameters, "cutoff": cutoff},
        ).scalars()
        dropped = 0
        if gone:
            listed, parameters = in_list("id", gone)
            dropped = connection.execute(
                f"DELETE FROM {ATTEMPTS} WHERE run_id IN ({listed})",
                parameters,
            ).rowcount
    return len(ids), len(gone), dropped


def _delete_items(database: Database, cutoff: datetime, batch: int) -> int:
    statement = f"""
        DELETE FROM {ITEMS} AS item WHERE (item.job, item.key) IN (
            SELECT item.job, item.key FROM {ITEMS} AS item WHERE {_PRUNABLE_ITEM}
            LIMIT :batch) AND {_PRUNABLE_ITEM}
    """
    with database.transaction() as connection:
        return connection.execute(statement, {"cutoff": cutoff, "batch": batch}).rowcount


def _stuck(database: Database, cutoff: datetime) -> int:
    statement = f"SELECT count(*) FROM {ITEMS} WHERE state = 'claimed' AND claimed_at < :cutoff"
    with database.transaction() as connection:
        return int(connection.execute(statement, {"cutoff": cutoff}).scalar())


def _count(database: Database, cutoff: datetime) -> Pruned:
    doomed = f"SELECT run.id FROM {RUNS} AS run WHERE {_PRUNABLE_RUN}"
    with database.transaction() as connection:
        counts = [
            connection.execute(statement, {"cutoff": cutoff}).scalar()
            for statement in (
                f"SELECT count(*) FROM {RUNS} AS run WHERE {_PRUNABLE_RUN}",
                f"SELECT count(*) FROM {ATTEMPTS} WHERE run_id IN ({doomed})",
                f"SELECT count(*) FROM {ITEMS} AS item WHERE {_PRUNABLE_ITEM}",
                f"SELECT count(*) FROM {SCHEDULES} AS schedule WHERE {_PRUNABLE_SCHEDULE}",
            )
        ]
    events = alert_events.prune(database, cutoff, 0, dry_run=True)
    stuck = _stuck(database, cutoff)
    return Pruned(
        cutoff, int(counts[0]), int(counts[1]), int(counts[2]), stuck, events, int(counts[3])
    )
