"""The jobs table: every job ever seen, its schedule, and when it was first seen."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime

from sqlalchemy import select, update

from scheduler.store.database import Database
from scheduler.store.schema import jobs


@dataclass(frozen=True)
class JobDefinitionRow:
    """What a node knows of a job and writes down for read-only commands."""

    name: str
    cron: str
    timezone: str
    lease_seconds: float
    timeout_seconds: float | None
    retries: int
    alert_after_seconds: float


@dataclass(frozen=True)
class JobRow:
    name: str
    cron: str
    timezone: str
    first_seen: datetime
    last_seen: datetime
    paused: bool
    paused_at: datetime | None
    lease_seconds: float | None
    timeout_seconds: float | None
    retries: int | None
    alert_after_seconds: float | None
    resumed_at: datetime | None = None
    caught_up_to: datetime | None = None


_POLICY_COLUMNS = (
    "cron",
    "timezone",
    "lease_seconds",
    "timeout_seconds",
    "retries",
    "alert_after_seconds",
)


def register(database: Database, definitions: Sequence[JobDefinitionRow]) -> None:
    """Upsert each loaded job's schedule and policy, keeping `first_seen` and `paused`."""
    if not definitions:
        return
    now = database.now()
    statement = database.insert(jobs).values(first_seen=now, last_seen=now, paused=False)
    statement = statement.on_conflict_do_update(
        index_elements=["name"],
        set_={
            **{column: statement.excluded[column] for column in _POLICY_COLUMNS},
            "last_seen": now,
        },
    )
    with database.transaction() as connection:
        connection.execute(statement, [asdict(definition) for definition in definitions])


def all_jobs(database: Database, names: Collection[str] | None = None) -> list[JobRow]:
    """Every job's row, or only those named (for a few: a long IN list costs more to
    send and plan than reading the whole table)."""
    statement = select(jobs).order_by(jobs.c.name)
    if names is not None:
        statement = statement.where(jobs.c.name.in_(sorted(names)))
    with database.transaction() as connection:
        return [JobRow(**row._mapping) for row in connection.execute(statement)]


def set_paused(database: Database, name: str, *, paused: bool) -> bool:
    """Pause or resume a job for every node; False if the database has never seen it."""
    now = database.now()
    values = {"paused": True, "paused_at": now} if paused else {"paused": False, "resumed_at": now}
    statement = (
        update(jobs).where(jobs.c.name == name, jobs.c.paused.is_(not paused)).values(**values)
    )
    with database.transaction() as connection:
        if connection.execute(statement).rowcount == 1:
            return True
        return (
            connection.execute(select(jobs.c.name).where(jobs.c.name == name)).first() is not None
        )
