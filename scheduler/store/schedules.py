"""Schedules created at run time: their rows, their changes, and the pass that fires them.

A schedule's periods are the runs of the job `@<key>`, so each is claimed by the same
primary key (job, period) as any code-declared job's, with the same fence, overlap and
events. The row says where the schedule stands (`next_due_at`, `owed`); the rules that
move it are pure (`scheduler.firing`), given here as a callback, since the store knows
neither triggers nor policies.

A pass (`fire`) is one transaction: it locks the due rows it takes (`FOR UPDATE SKIP
LOCKED`, so that nodes firing at once take different rows instead of queueing), claims
their periods, and moves the rows on. A change of a schedule locks its row, so it
commits either before a pass took the row (the pass sees it) or after the pass's claims
committed (they were claimed before the change): a deleted schedule fires nothing after
its deletion commits, and none of its periods is ever claimed twice.

Every change can join the application's own transaction (`foreign`): a schedule created
with a tenant commits with it or not at all.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler.model import ClaimResult, Due, Entry
from scheduler.states import Origin
from scheduler.store import claims, periods
from scheduler.store.connection import Connection, in_list
from scheduler.store.database import Database
from scheduler.store.fence import RUNS, lock_jobs
from scheduler.store.items import job_connection
from scheduler.store.wakeups import CHANNEL, Wake

SCHEDULES = "scheduler_schedules"
# The runs of a schedule belong to the job `@<key>`: no code-declared job's name may
# begin so (`registry`), so a schedule's periods never meet a job's.
RUN_PREFIX = "@"
# Rows one pass takes: each is a job lock in the pass's transaction.
ROWS_PER_PASS = claims.JOBS_PER_TRANSACTION
# Rows a page of a listing holds at most.
PAGE_MAX = 1000


def run_job(key: str) -> str:
    """The job name of a schedule's runs."""
    return RUN_PREFIX + key


def schedule_key(job: str) -> str | None:
    """The schedule a run's job name belongs to, or None for a code-declared job."""
    return job[len(RUN_PREFIX) :] if job.startswith(RUN_PREFIX) else None


@dataclass(frozen=True)
class ScheduleRow:
    key: str
    job: str
    trigger: str
    cron: str | None
    timezone: str
    every_seconds: int | None
    start_at: datetime | None
    once_at: datetime | None
    args: str
    catchup: str | None
    catchup_window_seconds: float | None
    catchup_limit: int | None
    jitter_seconds: float | None
    paused: bool
    paused_at: datetime | None
    next_due_at: datetime | None
    next_period: datetime | None
    owed: str | None
    version: int
    created_at: datetime
    updated_at: datetime
    fired_at: datetime | None
    fired_by: str | None
    deleted_at: datetime | None
    # Why the scheduler paused it (a failure streak); None for the application's pause.
    pause_reason: str | None = None

    @property
    def trigger_columns(self) -> dict[str, Any]:
        return {
            "trigger": self.trigger,
            "cron": self.cron,
            "timezone": self.timezone,
            "every_seconds": self.every_seconds,
            "start_at": self.start_at,
            "once_at": self.once_at,
        }


COLUMNS = tuple(column.name for column in fields(ScheduleRow))
_SELECT = ", ".join(COLUMNS)
# What a change may write (the key and the creation instant never change).
_CHANGED = tuple(name for name in COLUMNS if name not in ("key", "created_at"))


def _row(found: Any) -> ScheduleRow:
    values = found._asdict()
    values["paused"] = bool(values["paused"])
    return ScheduleRow(**values)


# -- a transaction of the scheduler's own, or the application's -----------------------


def foreign(connection: object) -> Connection:
    """The store's connection over the application's own, inside its open transaction
    (neither committed nor rolled back here): a SQLAlchemy Connection or Session, a
    psycopg connection, a `sqlite3` connection, or Django's inside `atomic()`."""
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None and isinstance(connection, psycopg.Connection):
        return Connection(connection, "postgresql")
    if isinstance(connection, sqlite3.Connection):
        return Connection(connection, "sqlite")
    try:
        return job_connection(connection)
    except TypeError:
        raise TypeError(
            "connection= takes a SQLAlchemy Connection or Session, a psycopg connection, "
            f"a sqlite3 connection or a Django connection, got {type(connection).__module__}."
            f"{type(connection).__qualname__}"
        ) from None


@contextmanager
def within(database: Database | None, connection: object | None) -> Iterator[Connection]:
    """The application's transaction when it gave its connection, else one of ours."""
    if connection is not None:
        yield foreign(connection)
        return
    assert database is not None
    with database.transaction() as own:
        yield own


def clock(connection: Connection) -> datetime:
    """The database's clock: the server's, or this host's (SQLite)."""
    if connection.is_postgres:
        moment = connection.execute("SELECT statement_timestamp() AS now").scalar()
        assert isinstance(moment, datetime)
        return moment.astimezone(UTC)
    return connection.host_clock()


def _now_sql(connection: Connection) -> str:
    return "statement_timestamp()" if connection.is_postgres else ":now"


def changed(connection: Connection, due: datetime | None) -> None:
    """Tell every node, when this transaction commits, that a schedule falls due at
    `due` (PostgreSQL NOTIFY `schedule:S`, S seconds from now; elsewhere the nodes
    poll). A node wakes only if that is sooner than it would anyway: a flood of new
    daily schedules wakes nobody until the first is due. Nothing to fire, no word."""
    if not connection.is_postgres or due is None:
        return
    connection.execute(
        "SELECT pg_notify(:channel, :kind || ':' ||"
        " greatest(0, extract(epoch FROM CAST(:due AS TIMESTAMPTZ) - statement_timestamp())))",
        {"channel": CHANNEL, "kind": Wake.SCHEDULE.value, "due": due},
    )


# -- reading and writing one schedule -------------------------------------------------


def read(connection: Connection, key: str, *, lock: bool = False) -> ScheduleRow | None:
    """One schedule's row, deleted or not; `lock` keeps it from any other change or pass
    until this transaction ends."""
    locking = " FOR UPDATE" if lock and connection.is_postgres else ""
    found = connection.execute(
        f"SELECT {_SELECT} FROM {SCHEDULES} WHERE key = :key{locking}", {"key": key}
    ).first()
    return _row(found) if found is not None else None


def insert(connection: Connection, row: ScheduleRow) -> bool:
    """Write a new schedule; False if the key is taken (by a live or deleted one)."""
    names = ", ".join(COLUMNS)
    values = ", ".join(f":{name}" for name in COLUMNS)
    statement = (
        f"INSERT INTO {SCHEDULES} ({names}) VALUES ({values}) "
        "ON CONFLICT (key) DO NOTHING RETURNING key"
    )
    inserted = connection.execute(statement, _parameters(row)).first() is not None
    if inserted and not row.paused:
        changed(connection, row.next_due_at)
    return inserted


def write(connection: Connection, row: ScheduleRow, seen: int) -> bool:
    """Replace a schedule's row by `row` if it is still at version `seen`."""
    assignments = ", ".join(f"{name} = :{name}" for name in _CHANGED)
    statement = f"UPDATE {SCHEDULES} SET {assignments} WHERE key = :key AND version = :seen"
    done = connection.execute(statement, {**_parameters(row), "seen": seen}).rowcount == 1
    if done and not row.paused and row.deleted_at is None:
        changed(connection, row.next_due_at)
    return done


def settle_deferred(connection: Connection, key: str) -> int:
    """A schedule being deleted: its periods still deferred (past its catch-up budget,
    approved, or waiting their pace) are recorded skipped (reason catchup) in the same
    transaction, so none runs after the deletion commits; how many."""
    statement = f"""
        UPDATE {RUNS} SET status = 'skipped', reason = 'catchup',
            finished_at = {_now_sql(connection)}
        WHERE job = :job AND status = 'deferred'
    """
    return int(connection.execute(statement, {"job": run_job(key)}).rowcount)


def remove(connection: Connection, key: str) -> bool:
    """Forget a deleted schedule's row (its periods keep their runs)."""
    statement = f"DELETE FROM {SCHEDULES} WHERE key = :key AND deleted_at IS NOT NULL"
    return connection.execute(statement, {"key": key}).rowcount == 1


def _parameters(row: ScheduleRow) -> dict[str, Any]:
    return {name: getattr(row, name) for name in COLUMNS}


# -- listing --------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    rows: list[ScheduleRow]
    # The key to pass as `after` for the next page; None on the last one.
    next_after: str | None = None


def page(
    database: Database,
    *,
    prefix: str = "",
    after: str | None = None,
    limit: int = 100,
    job: str | None = None,
    paused: bool | None = None,
    deleted: bool = False,
) -> Page:
    """Schedules in key order, a page at a time (keyset: each page one range of the
    primary key, however many schedules there are); `prefix` keeps one tenant's."""
    limit = max(1, min(limit, PAGE_MAX))
    conditions = ["key >= :low"]
    parameters: dict[str, Any] = {"low": max(prefix, after or ""), "limit": limit + 1}
    if after is not None:
        conditions.append("key > :after")
        parameters["after"] = after
    if prefix:
        conditions.append("key < :high")
        parameters["high"] = prefix_end(prefix)
    if job is not None:
        conditions.append("job = :job")
        parameters["job"] = job
    if paused is not None:
        conditions.append("paused = :paused")
        parameters["paused"] = paused
    conditions.append("deleted_at IS NOT NULL" if deleted else "deleted_at IS NULL")
    statement = (
        f"SELECT {_SELECT} FROM {SCHEDULES} WHERE {' AND '.join(conditions)} "
        "ORDER BY key LIMIT :limit"
    )
    with database.transaction() as connection:
        rows = [_row(found) for found in connection.execute(statement, parameters)]
    if len(rows) > limit:
        return Page(rows[:limit], rows[limit - 1].key)
    return Page(rows)


def prefix_end(prefix: str) -> str:
    """The least key greater than every key that starts with `prefix` (code point
    order, which both backends' key order is)."""
    return prefix + "\U0010ffff"


@dataclass(frozen=True)
class Totals:
    live: int
    paused: int
    due: int


def totals(database: Database) -> Totals:
    """How many schedules there are, paused, and due now."""
    statement = f"""
        SELECT count(*) AS live,
               coalesce(sum(CASE WHEN paused THEN 1 ELSE 0 END), 0) AS paused,
               coalesce(sum(CASE WHEN NOT paused AND next_due_at <= {database.now}
                            THEN 1 ELSE 0 END), 0) AS due
        FROM {SCHEDULES} WHERE deleted_at IS NULL
    """
    with database.transaction() as connection:
        found = connection.execute(statement).first()
    assert found is not None
    return Totals(int(found.live), int(found.paused), int(found.due))


# -- firing ---------------------------------------------------------------------------


@dataclass
class Fired:
    """What a pass does with one schedule, as the caller decided it: the periods to
    claim, those to record passed over, and where the schedule stands after."""

    due: list[Due]
    recorded: list[Entry]
    lease_seconds: float
    next_due_at: datetime | None
    owed: str | None
    # The period `next_due_at` fires, when jitter delays it; None: next_due_at itself.
    next_period: datetime | None = None


@dataclass
class Pass:
    """What one pass did: the claims (as any claim's), and the rows it took."""

    result: ClaimResult = field(default_factory=lambda: ClaimResult([], []))
    rows: list[ScheduleRow] = field(default_factory=list)


def _due_sql(database: Database) -> str:
    """The due rows of these jobs, oldest first, up to `:limit`. PostgreSQL reads each
    job's range of the due index in order and locks as it goes (`SKIP LOCKED`: rows
    another node is firing are passed over), so a pass costs its own rows whatever
    the number due: one `ORDER BY` over every job's rows sorted all 100,000 rows due at
    a peak for each pass (bench n)."""
    due = "next_due_at IS NOT NULL AND NOT paused AND deleted_at IS NULL"
    if database.is_postgres:
        return f"""
            SELECT taken.* FROM unnest(CAST(:jobs AS TEXT[])) AS wanted(job)
            CROSS JOIN LATERAL (
                SELECT {_SELECT} FROM {SCHEDULES}
                WHERE job = wanted.job AND {due} AND next_due_at <= statement_timestamp()
                ORDER BY next_due_at LIMIT :limit
                FOR UPDATE SKIP LOCKED) AS taken
            ORDER BY taken.next_due_at LIMIT :limit
        """
    return f"""
        SELECT {_SELECT} FROM {SCHEDULES}
        WHERE {due} AND next_due_at <= :now
          AND job IN (SELECT value FROM json_each(:jobs))
        ORDER BY next_due_at
        LIMIT :limit
    """


def _jobs_parameter(database: Database, jobs: Collection[str]) -> Any:
    if database.arrays:
        return sorted(jobs)
    return json.dumps(sorted(jobs))


def fire(
    database: Database,
    holder: str,
    jobs: Collection[str],
    plan: Callable[[ScheduleRow, datetime, Connection], Fired | None],
    *,
    limit: int = ROWS_PER_PASS,
    returned: Sequence[str] = (),
) -> Pass:
    """One pass over the due schedules of these jobs, in one transaction: take up to
    `limit` rows nobody else is firing, claim the periods `plan` says, record the ones it
    passes over, and move each row on. `plan` is given the pass's connection, to read
    what a catch-up budget has spent in the same transaction."""
    done = Pass()
    if not jobs:
        return done
    sent = time.monotonic()
    with database.guarded() as guarded:
        connection = guarded.connection
        now = guarded.began
        found = connection.execute(
            _due_sql(database), {"jobs": _jobs_parameter(database, jobs), "limit": limit}
        )
        # Read in full first: `plan` may run statements of its own on the connection.
        rows = [_row(found_row) for found_row in found]
        decided = [(row, plan(row, now, connection)) for row in rows]
        decided = [(row, fired) for row, fired in decided if fired is not None]
        if not decided:
            return done
        lock_jobs(database, connection, [run_job(row.key) for row, _ in decided])
        for row, fired in decided:
            assert fired is not None
            if fired.recorded:
                periods.record(
                    database,
                    connection,
                    run_job(row.key),
                    fired.recorded,
                    holder=holder,
                    lease_seconds=fired.lease_seconds,
                    origin=Origin.CATCHUP,
                )
        due = [item for _, fired in decided if fired is not None for item in fired.due]
        claims.claim_in(
            database, connection, due, holder, sent=sent, result=done.result, returned=returned
        )
        _move_on(connection, holder, decided)
        done.rows = [row for row, _ in decided]
    return done


def _move_on(
    connection: Connection, holder: str, decided: list[tuple[ScheduleRow, Fired | None]]
) -> None:
    """Write where each schedule of a pass stands now (PostgreSQL: one statement)."""
    moved = [(row, fired) for row, fired in decided if fired is not None]
    now = _now_sql(connection)
    if connection.is_postgres:
        connection.execute(
            f"""UPDATE {SCHEDULES} AS schedule
                SET next_due_at = moved.next_due_at, next_period = moved.next_period,
                    owed = moved.owed, fired_at = {now}, fired_by = :holder
                FROM unnest(CAST(:keys AS TEXT[]), CAST(:versions AS INT[]),
                            CAST(:next AS TIMESTAMPTZ[]), CAST(:periods AS TIMESTAMPTZ[]),
                            CAST(:owed AS TEXT[]))
                     AS moved(key, version, next_due_at, next_period, owed)
                WHERE schedule.key = moved.key AND schedule.version = moved.version""",
            {
                "holder": holder,
                "keys": [row.key for row, _ in moved],
                "versions": [row.version for row, _ in moved],
                "next": [fired.next_due_at for _, fired in moved],
                "periods": [fired.next_period for _, fired in moved],
                "owed": [fired.owed for _, fired in moved],
            },
        )
        return
    connection.execute_many(
        f"""UPDATE {SCHEDULES}
            SET next_due_at = :next_due_at, next_period = :next_period, owed = :owed,
                fired_at = {now}, fired_by = :holder
            WHERE key = :key AND version = :version""",
        [
            {
                "key": row.key,
                "version": row.version,
                "next_due_at": fired.next_due_at,
                "next_period": fired.next_period,
                "owed": fired.owed,
                "holder": holder,
            }
            for row, fired in moved
        ],
    )


def next_due_query(jobs: str) -> str:
    """PostgreSQL: the earliest instant a schedule of the jobs in the array `jobs` (its
    SQL) is due, or NULL: the first row of each job's range of the due index."""
    return f"""SELECT min(first.next_due_at)
        FROM unnest(CAST({jobs} AS TEXT[])) AS wanted(job)
        CROSS JOIN LATERAL (
            SELECT next_due_at FROM {SCHEDULES}
            WHERE job = wanted.job AND next_due_at IS NOT NULL AND NOT paused
              AND deleted_at IS NULL
            ORDER BY next_due_at LIMIT 1) AS first"""


def seconds_until_due(database: Database, jobs: Collection[str]) -> float | None:
    """How long until the earliest schedule of these jobs is due (≤ 0: now); None if
    none ever will be. PostgreSQL reads the first row of each job's range of the due
    index (a million schedules cost it a few index pages); SQLite takes the least."""
    if not jobs:
        return None
    if database.server_clock:
        statement = f"""SELECT extract(epoch FROM ({next_due_query(":jobs")})
                                      - statement_timestamp()) AS wait_s"""
    else:
        statement = f"""
            SELECT (julianday(min(next_due_at)) - julianday(:now)) * 86400 AS wait_s
            FROM {SCHEDULES}
            WHERE next_due_at IS NOT NULL AND NOT paused AND deleted_at IS NULL
              AND job IN (SELECT value FROM json_each(:jobs))
        """
    with database.transaction() as connection:
        found = connection.execute(statement, {"jobs": _jobs_parameter(database, jobs)}).first()
    return None if found is None or found.wait_s is None else float(found.wait_s)


def job_known(connection: Connection, job: str) -> bool:
    """Whether any node has registered this job (the jobs table has it)."""
    statement = "SELECT 1 AS known FROM scheduler_jobs WHERE name = :name"
    return connection.execute(statement, {"name": job}).first() is not None


# PostgreSQL: a batch of new schedules as one array a column, one statement per chunk.
_CAST = {
    "key": "TEXT",
    "job": "TEXT",
    "trigger": "TEXT",
    "cron": "TEXT",
    "timezone": "TEXT",
    "every_seconds": "INT",
    "start_at": "TIMESTAMPTZ",
    "once_at": "TIMESTAMPTZ",
    "args": "TEXT",
    "catchup": "TEXT",
    "catchup_window_seconds": "FLOAT8",
    "catchup_limit": "INT",
    "jitter_seconds": "FLOAT8",
    "paused": "BOOLEAN",
    "paused_at": "TIMESTAMPTZ",
    "next_due_at": "TIMESTAMPTZ",
    "next_period": "TIMESTAMPTZ",
    "owed": "TEXT",
    "version": "INT",
    "created_at": "TIMESTAMPTZ",
    "updated_at": "TIMESTAMPTZ",
    "fired_at": "TIMESTAMPTZ",
    "fired_by": "TEXT",
    "deleted_at": "TIMESTAMPTZ",
    "pause_reason": "TEXT",
}
INSERTED_PER_STATEMENT = 10_000


def insert_many(connection: Connection, new: Sequence[ScheduleRow]) -> list[str]:
    """Write new schedules; the keys that were taken already (by a live or a deleted
    schedule), which were not written."""
    taken: list[str] = []
    names = ", ".join(COLUMNS)
    if connection.is_postgres:
        arrays = ", ".join(f"CAST(:{name} AS {_CAST[name]}[])" for name in COLUMNS)
        statement = (
            f"INSERT INTO {SCHEDULES} ({names}) SELECT * FROM unnest({arrays}) "
            "ON CONFLICT (key) DO NOTHING RETURNING key"
        )
        for start in range(0, len(new), INSERTED_PER_STATEMENT):
            chunk = new[start : start + INSERTED_PER_STATEMENT]
            parameters = {name: [getattr(row, name) for row in chunk] for name in COLUMNS}
            written = set(connection.execute(statement, parameters).scalars())
            taken += [row.key for row in chunk if row.key not in written]
    else:
        values = ", ".join(f":{name}" for name in COLUMNS)
        statement = (
            f"INSERT INTO {SCHEDULES} ({names}) VALUES ({values}) "
            "ON CONFLICT (key) DO NOTHING RETURNING key"
        )
        for row in new:
            if connection.execute(statement, _parameters(row)).first() is None:
                taken.append(row.key)
    refused = set(taken)
    due = [
        row.next_due_at
        for row in new
        if row.key not in refused and not row.paused and row.next_due_at is not None
    ]
    if due:
        changed(connection, min(due))
    return taken


def known_jobs(connection: Connection, jobs: Collection[str]) -> set[str]:
    """Which of these jobs some node has registered."""
    if not jobs:
        return set()
    if connection.is_postgres:
        statement = "SELECT name FROM scheduler_jobs WHERE name = ANY(CAST(:names AS TEXT[]))"
        return set(connection.execute(statement, {"names": sorted(jobs)}).scalars())
    statement = (
        "SELECT name FROM scheduler_jobs WHERE name IN (SELECT value FROM json_each(:names))"
    )
    return set(connection.execute(statement, {"names": json.dumps(sorted(jobs))}).scalars())


# How many late schedules `late` counts per job at most (a bound on what it reads).
LATE_COUNTED = 1000


@dataclass(frozen=True)
class LateSchedules:
    count: int
    first: datetime


def late(
    database: Database, jobs: Collection[str], after: timedelta, limit: int = LATE_COUNTED
) -> dict[str, LateSchedules]:
    """Per job: its live, unpaused schedules due for longer than `after` (up to `limit`
    counted), and the earliest due instant among them. Reads each job's range of the
    due index, no further than `limit` rows."""
    if not jobs:
        return {}
    late_by, parameters = database.after("late_by", -after.total_seconds())
    found: dict[str, LateSchedules] = {}
    statement = f"""
        SELECT count(*) AS late, min(next_due_at) AS first FROM (
            SELECT next_due_at FROM {SCHEDULES}
            WHERE job = :job AND next_due_at IS NOT NULL AND NOT paused
              AND deleted_at IS NULL AND next_due_at < {late_by}
            ORDER BY next_due_at LIMIT :limit) AS due
    """
    with database.transaction() as connection:
        for job in sorted(jobs):
            row = connection.execute(statement, {**parameters, "job": job, "limit": limit}).first()
            if row is not None and row.late:
                found[job] = LateSchedules(int(row.late), row.first)
    return found


def failure_paused(database: Database, jobs: Collection[str]) -> dict[str, LateSchedules]:
    """Per job: its live schedules the scheduler paused after a failure streak, and the
    earliest pause among them (read through their own small index)."""
    if not jobs:
        return {}
    listed, parameters = in_list("job", sorted(jobs))
    statement = f"""
        SELECT job, count(*) AS paused, min(paused_at) AS first FROM {SCHEDULES}
        WHERE job IN ({listed}) AND pause_reason IS NOT NULL AND deleted_at IS NULL
        GROUP BY job
    """
    with database.transaction() as connection:
        return {
            row.job: LateSchedules(int(row.paused), row.first)
            for row in connection.execute(statement, parameters)
        }


def jobs_of(database: Database, run_jobs: Collection[str]) -> dict[str, str]:
    """The job of each schedule's run name (`@<key>`) among these, deleted or not."""
    keys = sorted({key for name in run_jobs if (key := schedule_key(name)) is not None})
    if not keys:
        return {}
    found: dict[str, str] = {}
    with database.transaction() as connection:
        for start in range(0, len(keys), PAGE_MAX):
            chunk = keys[start : start + PAGE_MAX]
            listed, parameters = in_list("key", chunk)
            statement = f"SELECT key, job FROM {SCHEDULES} WHERE key IN ({listed})"
            for row in connection.execute(statement, parameters):
                found[run_job(row.key)] = row.job
    return found
