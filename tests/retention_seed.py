"""History of every age, as nodes would have left it, for the prune tests: what a 90-day
retention must delete and what it must keep."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import timedelta

from scheduler.store.database import Database
from tests.integration.seed import add_attempt, add_item, add_job, add_run
from tests.sql import update

RETENTION = timedelta(days=90)


@dataclass
class Seeded:
    doomed_runs: set[str] = field(default_factory=set)
    kept_runs: set[str] = field(default_factory=set)
    doomed_items: set[str] = field(default_factory=set)
    kept_items: set[str] = field(default_factory=set)
    doomed_attempts: int = 0


def _run(
    database: Database,
    seeded: Seeded,
    job: str,
    age_days: int,
    status: str,
    *,
    doomed: bool,
    **extra: object,
) -> str:
    now = database.read_clock().replace(microsecond=0)
    period = now - timedelta(days=age_days)
    run_id = add_run(database, job, period, status, finished_at=period, **extra)  # type: ignore[arg-type]
    (seeded.doomed_runs if doomed else seeded.kept_runs).add(run_id)
    return run_id


def _item(
    database: Database, seeded: Seeded, key: str, age_days: int, state: str, *, doomed: bool
) -> None:
    moment = database.read_clock() - timedelta(days=age_days)
    add_item(database, "billing", key, moment, uuid.uuid4().hex, state=state)
    (seeded.doomed_items if doomed else seeded.kept_items).add(key)


def seed(database: Database) -> Seeded:
    seeded = Seeded()
    now = database.read_clock()
    # billing: no catch-up watermark row, so age and state alone decide.
    for age in (200, 150, 120):
        run_id = _run(database, seeded, "billing", age, "succeeded", doomed=True)
    add_attempt(database, run_id, "billing", now - timedelta(days=120), 1, "first try failed")
    seeded.doomed_attempts = 1
    _run(database, seeded, "billing", 95, "running", doomed=False)  # still held by a node
    _run(database, seeded, "billing", 93, "failed", doomed=False, retry_at=now)  # a retry is due
    _run(database, seeded, "billing", 10, "succeeded", doomed=False)
    # A period deferred by a catch-up budget waits for an operator, however old.
    _run(database, seeded, "billing", 140, "deferred", doomed=False, reason="budget")
    # yearly: its newest run and its newest success stay, however old.
    _run(database, seeded, "yearly", 500, "succeeded", doomed=True)
    _run(database, seeded, "yearly", 400, "succeeded", doomed=False)
    _run(database, seeded, "yearly", 300, "failed", doomed=False)
    # watched: catch-up has come up to 100 days ago; later rows stay, however old.
    add_job(database, "watched", "0 0 * * *", first_seen=now - timedelta(days=400))
    with database.transaction() as connection:
        update(
            connection,
            "scheduler_jobs",
            {"name": "watched"},
            caught_up_to=now - timedelta(days=100),
        )
    _run(database, seeded, "watched", 150, "succeeded", doomed=True)
    _run(database, seeded, "watched", 95, "succeeded", doomed=False)
    _run(database, seeded, "watched", 5, "succeeded", doomed=False)
    # unwatched: registered but never caught up: catch-up will still read its history.
    add_job(database, "unwatched", "0 0 * * *", first_seen=now - timedelta(days=400))
    _run(database, seeded, "unwatched", 150, "succeeded", doomed=False)
    _run(database, seeded, "unwatched", 5, "succeeded", doomed=False)
    # Items: old done ones go; recent ones and every claimed one stay.
    _item(database, seeded, "old-done-1", 100, "done", doomed=True)
    _item(database, seeded, "old-done-2", 300, "done", doomed=True)
    _item(database, seeded, "old-done-3", 91, "done", doomed=True)
    _item(database, seeded, "recent-done", 10, "done", doomed=False)
    _item(database, seeded, "old-stuck", 200, "claimed", doomed=False)
    return seeded
