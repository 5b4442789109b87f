"""The jobs table: every job ever seen, its schedule, and when it was first seen."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime

from sqlalchemy import case, or_, select, update

from scheduler.model import JobRow, PauseRow
from scheduler.store.database import Database
from scheduler.store.schema import jobs, pauses
from scheduler.store.wakeups import Wake, notify_on


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


_POLICY_COLUMNS = (
    "cron",
    "timezone",
    "lease_seconds",
    "timeout_seconds",
    "retries",
    "alert_after_seconds",
)


def register(database: Database, definitions: Sequence[JobDefinitionRow]) -> None:
    """Upsert each loaded job's schedule and policy, keeping `first_seen` and `paused`.

    A schedule (cron or time zone) other than the stored one is a change of schedule:
    its instant and the schedule it replaced are kept, for catch-up.
    """
    if not definitions:
        return
    now = database.now()
    statement = database.insert(jobs).values(first_seen=now, last_seen=now, paused=False)
    new = statement.excluded
    changed = or_(jobs.c.cron != new.cron, jobs.c.timezone != new.timezone)
    statement = statement.on_conflict_do_update(
        index_elements=["name"],
        set_={
            **{column: new[column] for column in _POLICY_COLUMNS},
            "last_seen": now,
            "schedule_changed_at": case((changed, now), else_=jobs.c.schedule_changed_at),
            "previous_cron": case((changed, jobs.c.cron), else_=jobs.c.previous_cron),
            "previous_timezone": case((changed, jobs.c.timezone), else_=jobs.c.previous_timezone),
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
        return [JobRow(**row._mapping) for row in connection.execute(statement).all()]


def set_paused(database: Database, name: str, *, paused: bool) -> bool:
    """Pause or resume a job for every node; False if the database has never seen it.

    Each pause is also kept in `scheduler_pauses`, so that catch-up knows every pause,
    not only the latest."""
    now = database.now()
    values = {"paused": True, "paused_at": now} if paused else {"paused": False, "resumed_at": now}
    statement = (
        update(jobs)
        .where(jobs.c.name == name, jobs.c.paused.is_(not paused))
        .values(**values)
        .returning(jobs.c.paused_at, jobs.c.resumed_at)
    )
    with database.transaction() as connection:
        changed = connection.execute(statement).first()
        if changed is not None:
            if paused:
                connection.execute(pauses.insert().values(job=name, paused_at=changed.paused_at))
            else:
                connection.execute(
                    update(pauses)
                    .where(pauses.c.job == name, pauses.c.resumed_at.is_(None))
                    .values(resumed_at=changed.resumed_at)
                )
                # Retries of a paused job wait for its resume: they may be due now.
                notify_on(database, connection, Wake.RECOVERY)
            return True
        return (
            connection.execute(select(jobs.c.name).where(jobs.c.name == name)).first() is not None
        )


def pauses_since(database: Database, names: Collection[str], since: datetime) -> list[PauseRow]:
    """Every pause of these jobs that was still on at or after `since`."""
    if not names:
        return []
    statement = (
        select(pauses.c.job, pauses.c.paused_at, pauses.c.resumed_at)
        .where(
            pauses.c.job.in_(sorted(names)),
            or_(pauses.c.resumed_at.is_(None), pauses.c.resumed_at > since),
        )
        .order_by(pauses.c.job, pauses.c.paused_at)
    )
    with database.transaction() as connection:
        return [PauseRow(*row) for row in connection.execute(statement)]
