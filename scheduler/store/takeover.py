"""Takeover: find runs another node may take (a lease that expired, a retry that is due),
take them as the next attempt, give them up, or park them for later.

A takeover is a compare-and-set on the state that was read and on that state still
being stale by the database clock, inside the job's lock (see `store.fence`); the
attempt it supersedes is copied to `scheduler_attempts` first, the row locked, so the
copy is exactly what is replaced. A paused job's runs are left as they are.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Select,
    and_,
    case,
    exists,
    func,
    literal,
    null,
    or_,
    select,
    tuple_,
    update,
)

from scheduler.model import Claim, Stale
from scheduler.states import Origin, Reason, RunStatus
from scheduler.store.database import Database
from scheduler.store.fence import ACTIVE, RETRYABLE
from scheduler.store.schema import attempts, jobs, runs

STALE_COLUMNS = (
    runs.c.id,
    runs.c.job,
    runs.c.period,
    runs.c.attempt,
    runs.c.holder,
    runs.c.status,
    runs.c.lease_seconds,
    runs.c.origin,
    runs.c.started_attempts,
)


def stale_from(row: Any, *, expired: bool) -> Stale:
    """A row selected with STALE_COLUMNS, as a takeover candidate."""
    return Stale(
        id=row.id,
        job=row.job,
        period=row.period,
        attempt=row.attempt,
        holder=row.holder,
        status=RunStatus(row.status),
        lease_seconds=row.lease_seconds,
        origin=Origin(row.origin),
        expired=expired,
        started_attempts=row.started_attempts,
    )


def _expired(now: ColumnElement[datetime]) -> ColumnElement[bool]:
    return and_(runs.c.status.in_(ACTIVE), runs.c.lease_expires_at < now)


def _retry_due(now: ColumnElement[datetime]) -> ColumnElement[bool]:
    """A retry whose time has come, and whose last attempt no longer runs anywhere."""
    return and_(
        runs.c.retry_at <= now,
        or_(runs.c.lease_expires_at.is_(None), runs.c.lease_expires_at < now),
    )


def _not_paused() -> ColumnElement[bool]:
    """A paused job's runs stay as they are until it is resumed."""
    return ~exists().where(jobs.c.name == runs.c.job, jobs.c.paused.is_(True))


def find_stale(database: Database, jobs: Collection[str], limit: int) -> list[Stale]:
    """Runs of these jobs whose lease expired or whose retry is due, oldest first;
    none of a paused job.

    The job names are not sent: a node may run 10,000 jobs and looks every second, and
    stale runs are few. Runs of jobs this node does not know are paged past here.
    """
    known = set(jobs)
    now = database.now()
    expired = _expired(now)
    found: list[Stale] = []
    after: tuple[datetime, str] | None = None
    with database.transaction() as connection:
        while len(found) < limit:
            statement = select(*STALE_COLUMNS, expired.label("expired")).where(
                expired | _retry_due(now), _not_paused()
            )
            if after is not None:
                statement = statement.where(tuple_(runs.c.period, runs.c.id) > tuple_(*after))
            page = connection.execute(
                statement.order_by(runs.c.period, runs.c.id).limit(limit)
            ).all()
            found += [
                stale_from(row, expired=bool(row.expired)) for row in page if row.job in known
            ]
            if len(page) < limit:
                break
            after = (page[-1].period, page[-1].id)
    return found[:limit]


def retake(
    database: Database,
    stale: Stale,
    holder: str,
    origin: Origin | None = None,
    *,
    by_hand: bool = False,
) -> Claim | None:
    """Take a stale run over as the next attempt; None if somebody else was faster, or if
    it is no longer stale (its holder renewed the lease after we read it).

    The superseded attempt is copied to `scheduler_attempts` first (an expired one as
    abandoned: `queue_expired` if its message was never started, else `lease_expired`),
    then the run row is compare-and-set on the state we read, and on it still being
    stale by the database clock. The job's lock orders it with the starts
    of its other periods. `by_hand` (rerun, backfill): a run that ended is taken as it
    was read, due or not, paused or not; it still must not have changed since.
    """
    new_origin = origin or stale.origin
    sent = time.monotonic()
    with database.guarded(jobs=[stale.job]) as guarded:
        connection = guarded.connection
        if not _supersede(database, connection, stale, by_hand=by_hand):
            return None
        taken = connection.execute(
            update(runs)
            .where(*_observed(database, stale, by_hand=by_hand))
            .values(
                attempt=stale.attempt + 1,
                holder=holder,
                status=RunStatus.CLAIMED.value,
                reason=None,
                origin=new_origin.value,
                lease_expires_at=database.lease_until(stale.lease_seconds),
                claimed_at=database.now(),
                queued_at=None,
                queue=None,
                started_at=None,
                finished_at=None,
                duration_ms=None,
                retry_at=None,
                error_type=None,
                error_message=None,
                error_traceback=None,
            )
        ).rowcount
    if taken != 1:
        return None
    return Claim(
        stale.id,
        stale.job,
        stale.period,
        stale.attempt + 1,
        holder,
        stale.lease_seconds,
        new_origin,
        sent,
        stale.started_attempts,
    )


def crashes_of(database: Database, run_id: str) -> int:
    """How many earlier attempts of the run were lost with their node while they ran."""
    statement = (
        select(func.count())
        .select_from(attempts)
        .where(
            attempts.c.run_id == run_id,
            attempts.c.reason == Reason.LEASE_EXPIRED.value,
            attempts.c.started_at.is_not(None),
        )
    )
    with database.transaction() as connection:
        return int(connection.execute(statement).scalar_one())


def park(database: Database, stale: Stale, retry_in: float) -> bool:
    """An expired run is given a later retry instead of being taken now: it ends
    abandoned (lease_expired) and any node may take it again after `retry_in` seconds."""
    values = {
        "status": RunStatus.ABANDONED.value,
        "reason": Reason.LEASE_EXPIRED.value,
        "lease_expires_at": None,
        "finished_at": database.now(),
        "retry_at": database.now_plus(retry_in),
    }
    with database.transaction() as connection:
        statement = update(runs).where(*_observed(database, stale)).values(**values)
        return connection.execute(statement).rowcount == 1


def give_up(database: Database, stale: Stale) -> bool:
    """A run that may not be taken again: an expired one ends abandoned, a retry is dropped."""
    values: dict[str, Any] = {"retry_at": None}
    if stale.expired:
        values |= {
            "status": RunStatus.ABANDONED.value,
            "reason": Reason.LEASE_EXPIRED.value,
            "lease_expires_at": None,
            "finished_at": database.now(),
        }
    with database.transaction() as connection:
        return (
            connection.execute(
                update(runs).where(*_observed(database, stale)).values(**values)
            ).rowcount
            == 1
        )


def _observed(
    database: Database, stale: Stale, *, by_hand: bool = False
) -> list[ColumnElement[bool]]:
    """The run is still exactly as we read it (same attempt, holder and status) and still
    stale by the database clock: an expired lease not renewed since, a retry whose time
    has come and whose function no longer runs (by hand: a run that ended, and whose
    function no longer runs)."""
    holder = runs.c.holder.is_(None) if stale.holder is None else runs.c.holder == stale.holder
    now = database.now()
    same = [
        runs.c.id == stale.id,
        runs.c.attempt == stale.attempt,
        runs.c.status == stale.status.value,
        holder,
    ]
    if by_hand:
        ended = or_(runs.c.lease_expires_at.is_(None), runs.c.lease_expires_at < now)
        return [*same, runs.c.status.not_in(ACTIVE), ended]
    return [*same, _expired(now) if stale.expired else _retry_due(now), _not_paused()]


def _supersede(
    database: Database, connection: Connection, stale: Stale, *, by_hand: bool = False
) -> bool:
    """Copy the attempt being replaced into the attempts table (once, whoever wins),
    locking the run's row (PostgreSQL): the takeover that follows in this transaction
    then finds it exactly as copied."""
    if stale.expired:
        status: ColumnElement[Any] = literal(RunStatus.ABANDONED.value)
        reason: ColumnElement[Any] = case(
            (runs.c.status == RunStatus.QUEUED.value, literal(Reason.QUEUE_EXPIRED.value)),
            else_=literal(Reason.LEASE_EXPIRED.value),
        )
        finished: ColumnElement[Any] = database.now()
    else:
        status, reason, finished = runs.c.status, runs.c.reason, runs.c.finished_at
    source = select(
        runs.c.id,
        runs.c.attempt,
        runs.c.job,
        runs.c.period,
        runs.c.holder,
        status,
        reason,
        runs.c.started_at,
        finished,
        runs.c.duration_ms,
        runs.c.error_type,
        runs.c.error_message,
        runs.c.error_traceback,
    ).where(*_observed(database, stale, by_hand=by_hand))
    if database.job_locks:  # a row lock too, where writers run side by side
        source = source.with_for_update(of=runs)
    statement = (
        database.insert(attempts)
        .from_select(_ATTEMPT_COLUMNS, source)
        .on_conflict_do_nothing(index_elements=["run_id", "attempt"])
        .returning(attempts.c.run_id)
    )
    return connection.execute(statement).first() is not None


_ATTEMPT_COLUMNS = [
    "run_id",
    "attempt",
    "job",
    "period",
    "node",
    "status",
    "reason",
    "started_at",
    "finished_at",
    "duration_ms",
    "error_type",
    "error_message",
    "error_traceback",
]


def seconds_until_recovery(database: Database, jobs: Sequence[str] | None) -> float | None:
    """How long until the next lease of these jobs expires or retry falls due, by the
    database clock; None if nothing is pending.

    `jobs=None` (the recovery loop) asks about every job without sending names, and only
    about deadlines still ahead: one already past belongs to a job no node here runs, or
    is taken by the pass that follows anyway.
    """
    if jobs is not None and not jobs:
        return None
    with database.transaction() as connection:
        return seconds_until_on(database, connection, jobs)


def next_deadline_on(database: Database, connection: Connection) -> float | None:
    """Seconds until the earliest lease end or retry of any job, by the database clock;
    negative when it has passed (a pass may be due that no notice announced); None if
    no run holds a lease or waits for a retry. For the heartbeat's read."""
    lease, retry = next_deadline_queries()
    statement = select(lease.scalar_subquery(), retry.scalar_subquery(), database.now())
    return seconds_to_deadline(*connection.execute(statement).one())


def next_deadline_queries() -> tuple[Select[Any], Select[Any]]:
    """The earliest lease end and the earliest retry, each a one-value query."""
    leased = runs.c.status.in_([*ACTIVE, RunStatus.TIMED_OUT.value])
    lease = select(func.min(runs.c.lease_expires_at)).where(leased)
    retry = select(func.min(runs.c.retry_at)).where(runs.c.retry_at.is_not(None))
    return lease, retry


def seconds_to_deadline(
    lease_at: datetime | None, retry_at: datetime | None, now: datetime
) -> float | None:
    deadlines = [_as_utc(moment) for moment in (lease_at, retry_at) if moment is not None]
    if not deadlines:
        return None
    return (min(deadlines) - _as_utc(now)).total_seconds()


def seconds_until_on(
    database: Database, connection: Connection, jobs: Sequence[str] | None
) -> float | None:
    """`seconds_until_recovery` inside a transaction of the caller's."""
    leased = runs.c.status.in_([*ACTIVE, RunStatus.TIMED_OUT.value])
    if jobs is None:
        now = database.now()
        lease_ahead = select(func.min(runs.c.lease_expires_at)).where(
            leased, runs.c.lease_expires_at > now
        )
        retry_ahead = select(func.min(runs.c.retry_at)).where(runs.c.retry_at > now)
        statement = select(
            lease_ahead.scalar_subquery(), retry_ahead.scalar_subquery(), database.now()
        )
    else:
        statement = select(
            func.min(case((leased, runs.c.lease_expires_at), else_=null())),
            func.min(runs.c.retry_at),
            database.now(),
        ).where(runs.c.job.in_(jobs), runs.c.status.in_([*ACTIVE, *RETRYABLE]))
    lease, retry, now = connection.execute(statement).one()
    deadlines = [_as_utc(moment) for moment in (lease, retry) if moment is not None]
    if not deadlines:
        return None
    return max(0.0, (min(deadlines) - _as_utc(now)).total_seconds())


def _as_utc(moment: datetime | str) -> datetime:
    """Aggregates lose the column type on SQLite and come back as text."""
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
