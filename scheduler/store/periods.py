"""Rows for periods, for catch-up, backfill, manual runs and the peers' shares: the
periods that already have rows, rows written in bulk, and the per-job catch-up
watermark."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Integer, String, bindparam, select, text, tuple_, update

from scheduler.model import FUTURE_TOLERANCE, Claim, Due, Entry, Stale, Written
from scheduler.states import Origin, RunStatus
from scheduler.store import events as alert_events
from scheduler.store.database import Database
from scheduler.store.events import PassedOver
from scheduler.store.fence import lock_jobs
from scheduler.store.schema import UTCDateTime, jobs, runs
from scheduler.store.takeover import STALE_COLUMNS, stale_from

# One INSERT statement carries at most this many rows (SQLite's variable limit).
ROWS_PER_STATEMENT = 2000


def existing_periods(
    database: Database, job: str, after: datetime, upto: datetime
) -> set[datetime]:
    """The periods in (after, upto] that already have a row."""
    statement = select(runs.c.period).where(
        runs.c.job == job, runs.c.period > after, runs.c.period <= upto
    )
    with database.transaction() as connection:
        return set(connection.execute(statement).scalars())


def write(
    database: Database,
    job: str,
    entries: Sequence[Entry],
    *,
    holder: str,
    lease_seconds: float,
    origin: Origin,
) -> Written:
    """Insert the entries that have no row yet; return the claimed ones this node won.

    Claimed entries take the job's lock, as a claim does, so that a period inserted
    here is seen by the start of any other period of the job.
    """
    won: list[Claim] = []
    sent = time.monotonic()
    with database.guarded() as guarded:
        connection = guarded.connection
        horizon = guarded.began + FUTURE_TOLERANCE
        early = [entry for entry in entries if entry.period > horizon]
        entries = [entry for entry in entries if entry.period <= horizon]
        claimed = [entry for entry in entries if entry.status is RunStatus.CLAIMED]
        recorded = [entry for entry in entries if entry.status is not RunStatus.CLAIMED]
        if claimed:
            lock_jobs(database, connection, [job])
        passed: list[PassedOver] = []
        if database.arrays:
            passed = _record_postgres(
                connection, job, recorded, holder=holder, lease_seconds=lease_seconds, origin=origin
            )
            recorded = []
        inserted: list[tuple[datetime, str, str | None]] = []
        for start in range(0, len(recorded), ROWS_PER_STATEMENT):
            chunk = recorded[start : start + ROWS_PER_STATEMENT]
            result = connection.execute(
                _insert(database, lease_expiry=None, holder=holder).returning(
                    runs.c.period, runs.c.status, runs.c.reason
                ),
                [_row(job, entry, origin, lease_seconds) for entry in chunk],
            )
            inserted += [(row.period, row.status, row.reason) for row in result]
        alert_events.passed_over(database, connection, job, passed + alert_events.grouped(inserted))
        expiry = database.lease_until(
            bindparam("lease_seconds") if database.arrays else lease_seconds
        )
        for start in range(0, len(claimed), ROWS_PER_STATEMENT):
            chunk = claimed[start : start + ROWS_PER_STATEMENT]
            rows = [_row(job, entry, origin, lease_seconds) for entry in chunk]
            periods = {row["id"]: row["period"] for row in rows}
            result = connection.execute(
                _insert(database, lease_expiry=expiry, holder=holder).returning(runs.c.id), rows
            )
            won += [
                Claim(run_id, job, periods[run_id], 1, holder, lease_seconds, origin, sent)
                for run_id in result.scalars()
            ]
    return Written(sorted(won, key=lambda claim: claim.period), early)


# PostgreSQL: skipped and missed periods travel as arrays, a few statements for a day of
# seconds (as an executemany, psycopg sent one INSERT per period: 86,400 for `latest`).
RECORDED_PER_STATEMENT = 10_000
_RECORD_POSTGRES = text(
    f"""
    INSERT INTO {runs.name} (id, job, period, status, reason, origin, attempt, holder,
                             lease_seconds, lease_expires_at, claimed_at, finished_at)
    SELECT entry.id, :job, entry.period, entry.status, entry.reason, :origin, 1, :holder,
           :lease_seconds, NULL, statement_timestamp(), statement_timestamp()
    FROM unnest(CAST(:ids AS TEXT[]), CAST(:periods AS TIMESTAMPTZ[]),
                CAST(:statuses AS TEXT[]), CAST(:reasons AS TEXT[]))
         AS entry(id, period, status, reason)
    ON CONFLICT (job, period) DO NOTHING
    RETURNING period, status, reason
    """  # noqa: S608 - the table name is ours; values are parameters
)
# What the insert wrote, grouped, for the alert events (not 86,400 rows back).
_RECORDED_GROUPS = "SELECT status, reason, min(period), max(period), count(*) FROM written"


def _record_postgres(
    connection: Connection,
    job: str,
    entries: Sequence[Entry],
    *,
    holder: str,
    lease_seconds: float,
    origin: Origin,
) -> list[PassedOver]:
    statement = text(
        f"WITH written AS ({_RECORD_POSTGRES.text}) {_RECORDED_GROUPS} GROUP BY status, reason"
    ).columns(
        status=String(), reason=String(), first=UTCDateTime(), last=UTCDateTime(), count=Integer()
    )
    passed: list[Any] = []
    for start in range(0, len(entries), RECORDED_PER_STATEMENT):
        chunk = entries[start : start + RECORDED_PER_STATEMENT]
        passed += connection.execute(
            statement,
            {
                "job": job,
                "origin": origin.value,
                "holder": holder,
                "lease_seconds": lease_seconds,
                "ids": [uuid.uuid4().hex for _ in chunk],
                "periods": [entry.period for entry in chunk],
                "statuses": [entry.status.value for entry in chunk],
                "reasons": [entry.reason.value if entry.reason else None for entry in chunk],
            },
        ).all()
    return [PassedOver(*row) for row in passed]


def _insert(database: Database, *, lease_expiry: Any, holder: str) -> Any:
    now = database.now()
    return (
        database.insert(runs)
        .values(
            id=bindparam("id"),
            job=bindparam("job"),
            period=bindparam("period"),
            status=bindparam("status"),
            reason=bindparam("reason"),
            origin=bindparam("origin"),
            attempt=1,
            holder=holder,
            lease_seconds=bindparam("lease_seconds"),
            lease_expires_at=lease_expiry,
            claimed_at=now,
            finished_at=None if lease_expiry is not None else now,
        )
        .on_conflict_do_nothing(index_elements=["job", "period"])
    )


def _row(job: str, entry: Entry, origin: Origin, lease_seconds: float) -> dict[str, Any]:
    return {
        "id": uuid.uuid4().hex,
        "job": job,
        "period": entry.period,
        "status": entry.status.value,
        "reason": entry.reason.value if entry.reason else None,
        "origin": origin.value,
        "lease_seconds": lease_seconds,
    }


# PostgreSQL: many jobs' scan ranges or watermarks travel as arrays in one statement.
JOBS_PER_STATEMENT = 1000
_EXISTING_POSTGRES = text(
    f"""
    SELECT run.job, run.period
    FROM unnest(CAST(:jobs AS TEXT[]), CAST(:afters AS TIMESTAMPTZ[]),
                CAST(:uptos AS TIMESTAMPTZ[])) AS scan(job, after, upto)
    JOIN {runs.name} AS run
      ON run.job = scan.job AND run.period > scan.after AND run.period <= scan.upto
    """  # noqa: S608 - the table name is ours; values are parameters
).columns(job=String(), period=UTCDateTime())
_ADVANCE_POSTGRES = text(
    f"""
    UPDATE {jobs.name} AS job SET caught_up_to = move.new
    FROM unnest(CAST(:names AS TEXT[]), CAST(:seen AS TIMESTAMPTZ[]),
                CAST(:new AS TIMESTAMPTZ[])) AS move(name, seen, new)
    WHERE job.name = move.name AND job.caught_up_to IS NOT DISTINCT FROM move.seen
    """  # noqa: S608 - the table name is ours; values are parameters
)


def existing_periods_of(
    database: Database, scans: Sequence[tuple[str, datetime, datetime]]
) -> dict[str, set[datetime]]:
    """For each (job, after, upto): the periods in (after, upto] that already have a row.

    A catch-up pass asks this for every job at once: on PostgreSQL one statement per
    JOBS_PER_STATEMENT jobs, so the pass does not cost a query per job.
    """
    found: dict[str, set[datetime]] = {job: set() for job, _, _ in scans}
    if not database.arrays:
        for job, after, upto in scans:
            found[job] = existing_periods(database, job, after, upto)
        return found
    with database.transaction() as connection:
        for start in range(0, len(scans), JOBS_PER_STATEMENT):
            chunk = scans[start : start + JOBS_PER_STATEMENT]
            parameters = {
                "jobs": [job for job, _, _ in chunk],
                "afters": [after for _, after, _ in chunk],
                "uptos": [upto for _, _, upto in chunk],
            }
            for job, period in connection.execute(_EXISTING_POSTGRES, parameters):
                found[job].add(period)
    return found


def advance_watermarks(
    database: Database, moves: Sequence[tuple[str, datetime | None, datetime]]
) -> None:
    """Move each (job, seen, new) watermark from the value we read; a job whose watermark
    another node moved first keeps that one. One statement per JOBS_PER_STATEMENT jobs on
    PostgreSQL."""
    if not database.arrays:
        for job, seen, new in moves:
            advance_watermark(database, job, seen, new)
        return
    with database.transaction() as connection:
        for start in range(0, len(moves), JOBS_PER_STATEMENT):
            chunk = moves[start : start + JOBS_PER_STATEMENT]
            parameters = {
                "names": [job for job, _, _ in chunk],
                "seen": [seen for _, seen, _ in chunk],
                "new": [new for _, _, new in chunk],
            }
            connection.execute(_ADVANCE_POSTGRES, parameters)


def advance_watermark(database: Database, job: str, seen: datetime | None, new: datetime) -> bool:
    """Move the job's catch-up watermark from the value we read to `new`; False if another
    node moved it first."""
    current = jobs.c.caught_up_to.is_(None) if seen is None else jobs.c.caught_up_to == seen
    statement = update(jobs).where(jobs.c.name == job, current).values(caught_up_to=new)
    with database.transaction() as connection:
        return connection.execute(statement).rowcount == 1


def runs_between(database: Database, job: str, first: datetime, last: datetime) -> list[Stale]:
    """Every run of the job with first <= period <= last, as takeover candidates."""
    statement = (
        select(*STALE_COLUMNS)
        .where(runs.c.job == job, runs.c.period >= first, runs.c.period <= last)
        .order_by(runs.c.period)
    )
    with database.transaction() as connection:
        return [stale_from(row, expired=False) for row in connection.execute(statement)]


_UNCLAIMED_POSTGRES = text(
    f"""
    SELECT due.index FROM unnest(CAST(:jobs AS TEXT[]), CAST(:periods AS TIMESTAMPTZ[]))
         WITH ORDINALITY AS due(job, period, index)
    WHERE NOT EXISTS (SELECT FROM {runs.name} AS run
                      WHERE run.job = due.job AND run.period = due.period)
    """  # noqa: S608 - the table name is our constant; values are parameters
)
# SQLite pages the (job, period) pairs of an IN list; each pair is two variables.
_PAIRS_PER_STATEMENT = 1000


def unclaimed(database: Database, due: Sequence[Due]) -> list[Due]:
    """The periods that have no row yet: what is left to claim of another node's share.

    Only a filter in front of `claim`, which still decides: a period claimed between
    this read and the claim is lost there, silently, as always.
    """
    if not due:
        return []
    with database.transaction() as connection:
        if database.arrays:
            rows = connection.execute(
                _UNCLAIMED_POSTGRES,
                {"jobs": [item.job for item in due], "periods": [item.period for item in due]},
            )
            return [due[index - 1] for (index,) in rows]
        taken: set[tuple[str, datetime]] = set()
        for start in range(0, len(due), _PAIRS_PER_STATEMENT):
            pairs = [(item.job, item.period) for item in due[start : start + _PAIRS_PER_STATEMENT]]
            statement = select(runs.c.job, runs.c.period).where(
                tuple_(runs.c.job, runs.c.period).in_(pairs)
            )
            taken.update((job, period) for job, period in connection.execute(statement))
    return [item for item in due if (item.job, item.period) not in taken]
