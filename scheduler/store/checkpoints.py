"""A run's checkpoint: JSON on the run row, written by the holder, read by the next attempt.

The write is fenced like every run write (id, attempt, holder, still active); taking
a run over for a new attempt leaves the column alone, so the new attempt finds it.
"""

from __future__ import annotations

from scheduler.model import Claim
from scheduler.store.database import Database
from scheduler.store.fence import FENCED_SQL, RUNS, fence_params


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
