"""A run's checkpoint: JSON on the run row, written by the holder, read by the next attempt.

The write is fenced like every run write (id, attempt, holder, still active); taking
a run over for a new attempt leaves the column alone, so the new attempt finds it.
"""

from __future__ import annotations

from sqlalchemy import select, update

from scheduler.model import Claim
from scheduler.store.database import Database
from scheduler.store.fence import fenced
from scheduler.store.schema import runs


def save(database: Database, claim: Claim, document: str) -> bool:
    """Store the JSON document on the run; False if the run is no longer ours."""
    statement = update(runs).where(fenced(claim)).values(checkpoint=document)
    with database.transaction() as connection:
        return connection.execute(statement).rowcount == 1


def load(database: Database, run_id: str) -> str | None:
    """The JSON document last stored on the run, by any attempt."""
    with database.transaction() as connection:
        document = connection.execute(
            select(runs.c.checkpoint).where(runs.c.id == run_id)
        ).scalar_one_or_none()
    return None if document is None else str(document)
