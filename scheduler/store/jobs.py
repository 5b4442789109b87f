"""The jobs table: every job ever seen, its schedule, and when it was first seen."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from scheduler.store.database import Database
from scheduler.store.schema import jobs


@dataclass(frozen=True)
class JobRow:
    name: str
    cron: str
    timezone: str
    first_seen: datetime
    last_seen: datetime
    paused: bool


def register(database: Database, definitions: Sequence[tuple[str, str, str]]) -> None:
    """Upsert (name, cron, timezone) for each loaded job, keeping `first_seen`."""
    if not definitions:
        return
    now = database.now()
    statement = database.insert(jobs).values(first_seen=now, last_seen=now, paused=False)
    statement = statement.on_conflict_do_update(
        index_elements=["name"],
        set_={
            "cron": statement.excluded.cron,
            "timezone": statement.excluded.timezone,
            "last_seen": now,
        },
    )
    rows = [{"name": name, "cron": cron, "timezone": zone} for name, cron, zone in definitions]
    with database.transaction() as connection:
        connection.execute(statement, rows)


def all_jobs(database: Database) -> list[JobRow]:
    with database.transaction() as connection:
        result = connection.execute(select(jobs).order_by(jobs.c.name))
        return [JobRow(**row._mapping) for row in result]
