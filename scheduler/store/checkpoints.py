"""A run's checkpoint: JSON on the run row, written by the holder, read by the next attempt
(and by the next period, as its `previous`).

The write is fenced like every run write (id, attempt, holder, still active); taking
a run over for a new attempt leaves the column alone, so the new attempt finds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from scheduler.model import Claim
from scheduler.states import RunStatus
from scheduler.store.database import Database
from scheduler.store.fence import FENCED_SQL, RUNS, fence_params

# The outcomes of a run whose function was called (or may have been): not a period
# skipped, missed or given back unstarted.
_RAN = ("succeeded", "failed", "timed_out", "abandoned")


@dataclass(frozen=True)
class Ended:
    """The newest earlier period of a job that reached the outcome of a run."""

    period: datetime
    status: RunStatus
    attempt: int
    finished_at: datetime | None
    checkpoint: str | None


def save(database: Database, claim: Claim, document: str) -> bool:
    """Store the JSON document on the run; False if the run is no longer ours."""
    statement = f"UPDATE {RUNS} SET checkpoint = :document WHERE {FENCED_SQL}"
    with database.transaction() as connection:
        return (
            connection.execute(statement, {**fence_params(claim), "document": document}).rowcount
            == 1
        )


def load(database: Database, run_id: str) -> str | None:
    """The JSON document last stored on the run, by any attempt."""
    with database.transaction() as connection:
        document = connection.execute(
            f"SELECT checkpoint FROM {RUNS} WHERE id = :id",
            {"id": run_id},
        ).scalar()
    return None if document is None else str(document)


def previous(database: Database, job: str, period: datetime) -> Ended | None:
    """The newest period of `job` before `period` whose run reached an outcome (found
    backwards through the primary key, whatever the job's history)."""
    statement = f"""
        SELECT period, status, attempt, finished_at, checkpoint FROM {RUNS}
        WHERE job = :job AND period < :period
          AND ended_status IN ('{"', '".join(_RAN)}') AND started_attempts > 0
        ORDER BY period DESC LIMIT 1
    """
    with database.transaction() as connection:
        row = connection.execute(statement, {"job": job, "period": period}).first()
    if row is None:
        return None
    checkpoint = None if row.checkpoint is None else str(row.checkpoint)
    return Ended(row.period, RunStatus(row.status), row.attempt, row.finished_at, checkpoint)
