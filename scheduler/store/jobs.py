"""The jobs table: every job ever seen, its schedule, and when it was first seen."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from scheduler.model import JobRow, PauseRow
from scheduler.store.connection import in_list
from scheduler.store.database import Connection, Database
from scheduler.store.wakeups import Wake, notify_on

JOBS = "scheduler_jobs"
PAUSES = "scheduler_pauses"


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
    calendars: str | None = None


_POLICY_COLUMNS = (
    "cron",
    "timezone",
    "lease_seconds",
    "timeout_seconds",
    "retries",
    "alert_after_seconds",
    "calendars",
)
_DEFINITION_COLUMNS = ("name", *_POLICY_COLUMNS)


# A schedule (cron or time zone) other than the stored one is a change of schedule. In
# an upsert's SET every expression reads the row as it was.
_CHANGED = f"({JOBS}.cron <> excluded.cron OR {JOBS}.timezone <> excluded.timezone)"


def _upsert(database: Database, source: str) -> str:
    now = database.now
    return f"""
        INSERT INTO {JOBS} (name, cron, timezone, lease_seconds, timeout_seconds, retries,
                            alert_after_seconds, calendars, first_seen, last_seen, paused)
        {source}
        ON CONFLICT (name) DO UPDATE SET
            cron = excluded.cron, timezone = excluded.timezone,
            lease_seconds = excluded.lease_seconds,
            timeout_seconds = excluded.timeout_seconds, retries = excluded.retries,
            alert_after_seconds = excluded.alert_after_seconds,
            calendars = excluded.calendars, last_seen = {now},
            schedule_changed_at = CASE WHEN {_CHANGED} THEN {now}
                                       ELSE {JOBS}.schedule_changed_at END,
            previous_cron = CASE WHEN {_CHANGED} THEN {JOBS}.cron
                                 ELSE {JOBS}.previous_cron END,
            previous_timezone = CASE WHEN {_CHANGED} THEN {JOBS}.timezone
                                     ELSE {JOBS}.previous_timezone END
    """


def register(database: Database, definitions: Sequence[JobDefinitionRow]) -> None:
    """Upsert each loaded job's schedule and policy, keeping `first_seen` and `paused`.

    A schedule (cron or time zone) other than the stored one is a change of schedule:
    its instant and the schedule it replaced are kept, for catch-up. On PostgreSQL the
    definitions travel as arrays (one statement for 10,000 jobs).
    """
    if not definitions:
        return
    now = database.now
    with database.transaction() as connection:
        if database.arrays:
            connection.execute(
                _upsert(
                    database,
                    f"""SELECT *, {now}, {now}, false FROM unnest(
                        CAST(:name AS TEXT[]), CAST(:cron AS TEXT[]),
                        CAST(:timezone AS TEXT[]), CAST(:lease_seconds AS FLOAT8[]),
                        CAST(:timeout_seconds AS FLOAT8[]), CAST(:retries AS INT[]),
                        CAST(:alert_after_seconds AS FLOAT8[]), CAST(:calendars AS TEXT[]))""",
                ),
                {
                    column: [getattr(definition, column) for definition in definitions]
                    for column in _DEFINITION_COLUMNS
                },
            )
            return
        connection.execute_many(
            _upsert(
                database,
                f"""VALUES (:name, :cron, :timezone, :lease_seconds, :timeout_seconds,
                            :retries, :alert_after_seconds, :calendars, {now}, {now},
                            FALSE)""",
            ),
            [
                {column: getattr(definition, column) for column in _DEFINITION_COLUMNS}
                for definition in definitions
            ],
        )


_JOB_COLUMNS = ", ".join(JobRow.__dataclass_fields__)


def all_jobs(database: Database, names: Collection[str] | None = None) -> list[JobRow]:
    """Every job's row, or only those named (for a few: a long IN list costs more to
    send and plan than reading the whole table)."""
    where, parameters = "", dict[str, Any]()
    if names is not None:
        listed, parameters = in_list("name", sorted(names))
        where = f" WHERE name IN ({listed})"
    statement = f"SELECT {_JOB_COLUMNS} FROM {JOBS}{where} ORDER BY name"
    with database.transaction() as connection:
        return [JobRow(**row._asdict()) for row in connection.execute(statement, parameters)]


def set_paused(database: Database, name: str, *, paused: bool) -> bool:
    """Pause or resume a job for every node; False if the database has never seen it.

    Each pause is also kept in `scheduler_pauses`, so that catch-up knows every pause,
    not only the latest."""
    with database.transaction() as connection:
        if paused:
            changed = pause_in(database, connection, name)
        else:
            changed = _resume_in(database, connection, name)
        if changed:
            return True
        found = connection.execute(
            f"SELECT name FROM {JOBS} WHERE name = :name",
            {"name": name},
        )
        return found.first() is not None


def pause_in(
    database: Database, connection: Connection, name: str, reason: str | None = None
) -> bool:
    """Pause a job inside the caller's transaction, recorded in `scheduler_pauses` with
    `reason` (None: an operator's pause; else the scheduler's, and why); False if it
    was paused already, or is unknown."""
    paused = connection.execute(
        f"""UPDATE {JOBS} SET paused = TRUE, paused_at = {database.now}, pause_reason = :reason
            WHERE name = :name AND NOT paused RETURNING paused_at""",
        {"name": name, "reason": reason},
    ).first()
    if paused is None:
        return False
    connection.execute(
        f"INSERT INTO {PAUSES} (job, paused_at, reason) VALUES (:job, :paused_at, :reason)",
        {"job": name, "paused_at": paused.paused_at, "reason": reason},
    )
    return True


def _resume_in(database: Database, connection: Connection, name: str) -> bool:
    resumed = connection.execute(
        f"""UPDATE {JOBS} SET paused = FALSE, resumed_at = {database.now}, pause_reason = NULL
            WHERE name = :name AND paused RETURNING resumed_at""",
        {"name": name},
    ).first()
    if resumed is None:
        return False
    connection.execute(
        f"""UPDATE {PAUSES} SET resumed_at = :resumed_at
            WHERE job = :job AND resumed_at IS NULL""",
        {"job": name, "resumed_at": resumed.resumed_at},
    )
    # Retries of a paused job wait for its resume: they may be due now.
    notify_on(database, connection, Wake.RECOVERY)
    return True


def pauses_since(database: Database, names: Collection[str], since: datetime) -> list[PauseRow]:
    """Every pause of these jobs that was still on at or after `since`."""
    if not names:
        return []
    listed, parameters = in_list("job", sorted(names))
    statement = f"""
        SELECT job, paused_at, resumed_at FROM {PAUSES}
        WHERE job IN ({listed}) AND (resumed_at IS NULL OR resumed_at > :since)
        ORDER BY job, paused_at
    """
    with database.transaction() as connection:
        return [
            PauseRow(*row) for row in connection.execute(statement, {**parameters, "since": since})
        ]
