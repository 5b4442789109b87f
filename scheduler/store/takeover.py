"""Takeover: find runs another node may take (a lease that expired, a retry that is due),
take them as the next attempt, give them up, or park them for later.

A takeover is a compare-and-set on the state that was read and on that state still
being stale by the database clock, inside the job's lock (see `store.fence`); the
attempt it supersedes is copied to `scheduler_attempts` first, the row locked, so the
copy is exactly what is replaced. A paused job's runs are left as they are.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from scheduler.model import Claim, Stale
from scheduler.states import Origin, Reason, RunStatus
from scheduler.store.connection import in_list
from scheduler.store.database import Connection, Database
from scheduler.store.fence import ACTIVE_SQL, RETRYABLE_SQL, RUNS
from scheduler.store.requests import Fenced

ATTEMPTS = "scheduler_attempts"
STALE_COLUMNS = "id, job, period, attempt, holder, status, lease_seconds, origin, started_attempts"


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


def _expired(now: str) -> str:
    return f"(live AND status IN ({ACTIVE_SQL}) AND lease_expires_at < {now})"


def _retry_due(now: str) -> str:
    """A retry whose time has come, and whose last attempt no longer runs anywhere."""
    return f"(retry_at <= {now} AND (lease_expires_at IS NULL OR lease_expires_at < {now}))"


# A paused job's runs stay as they are until it is resumed.
_NOT_PAUSED = (
    f"NOT EXISTS (SELECT 1 FROM scheduler_jobs AS job WHERE job.name = {RUNS}.job AND job.paused)"
)


def find_stale(database: Database, jobs: Collection[str], limit: int) -> list[Stale]:
    """Runs of these jobs whose lease expired or whose retry is due, oldest first;
    none of a paused job.

    The job names are not sent: a node may run 10,000 jobs and looks every second, and
    stale runs are few. Runs of jobs this node does not know are paged past here.
    """
    known = jobs if isinstance(jobs, Mapping) else set(jobs)
    now = database.now
    found: list[Stale] = []
    after: tuple[datetime, str] | None = None
    with database.transaction() as connection:
        while len(found) < limit:
            parameters: dict[str, Any] = {"limit": limit}
            paging = ""
            if after is not None:
                paging = " AND (period, id) > (:after_period, :after_id)"
                parameters |= {"after_period": after[0], "after_id": after[1]}
            page = connection.execute(
                f"""SELECT {STALE_COLUMNS}, {_expired(now)} AS expired FROM {RUNS}
                    WHERE ({_expired(now)} OR {_retry_due(now)}) AND {_NOT_PAUSED}{paging}
                    ORDER BY period, id LIMIT :limit""",
                parameters,
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
    fenced: Fenced | None = None,
) -> Claim | None:
    """Take a stale run over as the next attempt; None if somebody else was faster, or if
    it is no longer stale (its holder renewed the lease after we read it).

    The superseded attempt is copied to `scheduler_attempts` first (an expired one as
    abandoned: `queue_expired` if its message was never started, else `lease_expired`),
    then the run row is compare-and-set on the state we read, and on it still being
    stale by the database clock. The job's lock orders it with the starts
    of its other periods. `by_hand` (rerun, backfill): a run that ended is taken as it
    was read, due or not, paused or not; it still must not have changed since.
    `fenced`: taken for a console request, only while it is still this node's, and
    recorded on it in the same transaction.
    """
    new_origin = origin or stale.origin
    sent = time.monotonic()
    with database.guarded(jobs=[stale.job]) as guarded:
        connection = guarded.connection
        if fenced is not None:
            fenced.enter(database, connection)
        if not _supersede(database, connection, stale, by_hand=by_hand):
            return None
        observed, parameters = _observed(database, stale, by_hand=by_hand)
        lease, leased = database.lease("lease_s", stale.lease_seconds)
        taken = connection.execute(
            f"""UPDATE {RUNS} SET attempt = :new_attempt, holder = :holder, status = 'claimed',
                    reason = NULL, origin = :origin, lease_expires_at = {lease},
                    claimed_at = {database.now}, queued_at = NULL, queue = NULL,
                    started_at = NULL, began_at = NULL, finished_at = NULL,
                    duration_ms = NULL,
                    retry_at = NULL, error_type = NULL, error_message = NULL,
                    error_traceback = NULL
                WHERE {observed}""",
            {
                **parameters,
                **leased,
                "new_attempt": stale.attempt + 1,
                "holder": holder,
                "origin": new_origin.value,
            },
        ).rowcount
        if taken != 1:
            return None
        claim = Claim(
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
        if fenced is not None:
            fenced.leave(database, connection, [claim])
    return claim


def crashes_of(database: Database, run_id: str) -> int:
    """How many earlier attempts of the run were lost with their node while they ran."""
    statement = f"""
        SELECT count(*) FROM {ATTEMPTS}
        WHERE run_id = :run_id AND reason = '{Reason.LEASE_EXPIRED.value}'
          AND started_at IS NOT NULL
    """
    with database.transaction() as connection:
        return int(connection.execute(statement, {"run_id": run_id}).scalar())


def park(database: Database, stale: Stale, retry_in: float) -> bool:
    """An expired run is given a later retry instead of being taken now: it ends
    abandoned (lease_expired) and any node may take it again after `retry_in` seconds."""
    observed, parameters = _observed(database, stale)
    retry, later = database.after("retry_in", retry_in)
    statement = f"""
        UPDATE {RUNS} SET status = 'abandoned', reason = '{Reason.LEASE_EXPIRED.value}',
            lease_expires_at = NULL, finished_at = {database.now}, retry_at = {retry}
        WHERE {observed}
    """
    with database.transaction() as connection:
        return connection.execute(statement, {**parameters, **later}).rowcount == 1


def give_up(database: Database, stale: Stale) -> bool:
    """A run that may not be taken again: an expired one ends abandoned, a retry is dropped."""
    values = "retry_at = NULL"
    if stale.expired:
        values += (
            f", status = 'abandoned', reason = '{Reason.LEASE_EXPIRED.value}',"
            f" lease_expires_at = NULL, finished_at = {database.now}"
        )
    observed, parameters = _observed(database, stale)
    with database.transaction() as connection:
        statement = f"UPDATE {RUNS} SET {values} WHERE {observed}"
        return connection.execute(statement, parameters).rowcount == 1


def _observed(
    database: Database, stale: Stale, *, by_hand: bool = False
) -> tuple[str, dict[str, Any]]:
    """The run is still exactly as we read it (same attempt, holder and status) and still
    stale by the database clock: an expired lease not renewed since, a retry whose time
    has come and whose function no longer runs (by hand: a run that ended, and whose
    function no longer runs). As SQL on the runs table, and its parameters."""
    now = database.now
    holder = "holder IS NULL" if stale.holder is None else "holder = :seen_holder"
    same = (
        f"{RUNS}.id = :seen_id AND attempt = :seen_attempt AND status = :seen_status AND {holder}"
    )
    parameters = {
        "seen_id": stale.id,
        "seen_attempt": stale.attempt,
        "seen_status": stale.status.value,
        "seen_holder": stale.holder,
    }
    if by_hand:
        ended = f"(lease_expires_at IS NULL OR lease_expires_at < {now})"
        return f"{same} AND status NOT IN ({ACTIVE_SQL}) AND {ended}", parameters
    stale_now = _expired(now) if stale.expired else _retry_due(now)
    return f"{same} AND {stale_now} AND {_NOT_PAUSED}", parameters


def _supersede(
    database: Database, connection: Connection, stale: Stale, *, by_hand: bool = False
) -> bool:
    """Copy the attempt being replaced into the attempts table (once, whoever wins),
    locking the run's row (PostgreSQL): the takeover that follows in this transaction
    then finds it exactly as copied."""
    if stale.expired:
        status = "'abandoned'"
        reason = (
            f"CASE WHEN status = 'queued' THEN '{Reason.QUEUE_EXPIRED.value}'"
            f" ELSE '{Reason.LEASE_EXPIRED.value}' END"
        )
        finished = database.now
    else:
        status, reason, finished = "status", "reason", "finished_at"
    observed, parameters = _observed(database, stale, by_hand=by_hand)
    # A row lock too, where writers run side by side.
    locking = f" FOR UPDATE OF {RUNS}" if database.job_locks else ""
    statement = f"""
        INSERT INTO {ATTEMPTS} (run_id, attempt, job, period, node, status, reason,
                                started_at, finished_at, duration_ms, error_type,
                                error_message, error_traceback)
        SELECT id, attempt, job, period, holder, {status}, {reason}, started_at, {finished},
               duration_ms, error_type, error_message, error_traceback
        FROM {RUNS} WHERE {observed}{locking}
        ON CONFLICT (run_id, attempt) DO NOTHING
        RETURNING run_id
    """
    return connection.execute(statement, parameters).first() is not None


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
    row = connection.execute(
        f"SELECT ({lease}) AS lease_at, ({retry}) AS retry_at, {database.now} AS now"
    ).one()
    return seconds_to_deadline(*row)


def next_deadline_queries() -> tuple[str, str]:
    """The earliest lease end and the earliest retry, each a one-value query."""
    lease = (
        f"SELECT min(lease_expires_at) FROM {RUNS}"
        f" WHERE live AND status IN ({ACTIVE_SQL}, 'timed_out')"
    )
    retry = f"SELECT min(retry_at) FROM {RUNS} WHERE retry_at IS NOT NULL"
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
    now = database.now
    leased = f"live AND status IN ({ACTIVE_SQL}, 'timed_out')"
    parameters: dict[str, Any] = {}
    if jobs is None:
        statement = f"""SELECT
            (SELECT min(lease_expires_at) FROM {RUNS}
             WHERE {leased} AND lease_expires_at > {now}) AS lease_at,
            (SELECT min(retry_at) FROM {RUNS} WHERE retry_at > {now}) AS retry_at,
            {now} AS now"""
    else:
        names, parameters = in_list("job", list(jobs))
        # Two lookups: the live rows of these jobs, and their rows with a retry (few).
        statement = f"""SELECT
            (SELECT min(lease_expires_at) FROM {RUNS}
             WHERE job IN ({names}) AND {leased}) AS lease_at,
            (SELECT min(retry_at) FROM {RUNS}
             WHERE job IN ({names}) AND retry_at IS NOT NULL
               AND status IN ({ACTIVE_SQL}, {RETRYABLE_SQL})) AS retry_at,
            {now} AS now"""
    lease, retry, moment = connection.execute(statement, parameters).one()
    deadlines = [_as_utc(value) for value in (lease, retry) if value is not None]
    if not deadlines:
        return None
    return max(0.0, (min(deadlines) - _as_utc(moment)).total_seconds())


def _as_utc(moment: datetime | str) -> datetime:
    """An instant, from SQLite's text where a value came back untyped."""
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
