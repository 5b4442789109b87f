"""Rows for periods, for catch-up, backfill, manual runs and the peers' shares: the
periods that already have rows, rows written in bulk, and the per-job catch-up
watermark."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from scheduler.model import FUTURE_TOLERANCE, Claim, Due, Entry, Stale, Written
from scheduler.states import Origin, RunStatus
from scheduler.store import events as alert_events
from scheduler.store.connection import pairs_in
from scheduler.store.database import Connection, Database
from scheduler.store.events import PassedOver
from scheduler.store.fence import RUNS, lock_jobs
from scheduler.store.requests import Fenced
from scheduler.store.takeover import STALE_COLUMNS, stale_from

JOBS = "scheduler_jobs"
# Rows written in one transaction before the next (SQLite: a statement a row).
ROWS_PER_STATEMENT = 2000


def existing_periods(
    database: Database, job: str, after: datetime, upto: datetime
) -> set[datetime]:
    """The periods in (after, upto] that already have a row."""
    with database.transaction() as connection:
        return existing_periods_on(connection, job, after, upto)


def existing_periods_on(
    connection: Connection, job: str, after: datetime, upto: datetime
) -> set[datetime]:
    """`existing_periods`, inside the caller's transaction."""
    statement = (
        f"SELECT period FROM {RUNS} WHERE job = :job AND period > :after AND period <= :upto"
    )
    return set(connection.execute(statement, {"job": job, "after": after, "upto": upto}).scalars())


def write(
    database: Database,
    job: str,
    entries: Sequence[Entry],
    *,
    holder: str,
    lease_seconds: float,
    origin: Origin,
    fenced: Fenced | None = None,
    planned: Callable[[Connection], Sequence[Entry]] | None = None,
    locks: Sequence[str] = (),
) -> Written:
    """Insert the entries that have no row yet; return the claimed ones this node won.

    Claimed entries take the job's lock, as a claim does, so that a period inserted
    here is seen by the start of any other period of the job. `fenced`: claims made for
    a console request, only while it is still this node's, recorded on it in the same
    transaction. `planned`: the entries are decided inside the transaction, under the
    job's lock (and `locks`, more names locked as jobs are), from what it reads there
    (a catch-up budget: two nodes' passes must not each spend it on a view that misses
    the other's).
    """
    won: list[Claim] = []
    sent = time.monotonic()
    with database.guarded(jobs=[job, *locks] if planned is not None else ()) as guarded:
        connection = guarded.connection
        if planned is not None:
            entries = planned(connection)
        horizon = guarded.began + FUTURE_TOLERANCE
        early = [entry for entry in entries if entry.period > horizon]
        entries = [entry for entry in entries if entry.period <= horizon]
        claimed = [entry for entry in entries if entry.status is RunStatus.CLAIMED]
        recorded = [entry for entry in entries if entry.status is not RunStatus.CLAIMED]
        if claimed:
            lock_jobs(database, connection, [job])
        if fenced is not None:
            fenced.enter(database, connection)
        record(
            database,
            connection,
            job,
            recorded,
            holder=holder,
            lease_seconds=lease_seconds,
            origin=origin,
        )
        if database.arrays:
            won = _claim_postgres(
                connection,
                job,
                claimed,
                holder=holder,
                lease_seconds=lease_seconds,
                origin=origin,
                sent=sent,
            )
        else:
            statement = _insert(database, leased=True) + " RETURNING id"
            for entry in claimed:
                row = _row(job, entry, origin, lease_seconds, holder)
                row["expiry"] = database.host_after(lease_seconds)
                for run_id in connection.execute(statement, row).scalars():
                    won.append(
                        Claim(run_id, job, entry.period, 1, holder, lease_seconds, origin, sent)
                    )
        if fenced is not None:
            fenced.leave(database, connection, won)
    return Written(sorted(won, key=lambda claim: claim.period), early)


def record(
    database: Database,
    connection: Connection,
    job: str,
    entries: Sequence[Entry],
    *,
    holder: str,
    lease_seconds: float,
    origin: Origin,
) -> None:
    """Inside an open transaction: write the periods passed over (skipped, missed) that
    have no row yet, and the alert events about them."""
    passed: list[PassedOver] = []
    if database.arrays:
        passed = _record_postgres(
            connection, job, entries, holder=holder, lease_seconds=lease_seconds, origin=origin
        )
        entries = []
    inserted: list[tuple[datetime, str, str | None]] = []
    statement = _insert(database, leased=False)
    for entry in entries:
        row = _row(job, entry, origin, lease_seconds, holder)
        result = connection.execute(statement + " RETURNING period, status, reason", row)
        inserted += [(found.period, found.status, found.reason) for found in result]
    alert_events.passed_over(database, connection, job, passed + alert_events.grouped(inserted))


# PostgreSQL: skipped and missed periods travel as arrays, a few statements for a day of
# seconds (as an executemany, psycopg sent one INSERT per period: 86,400 for `latest`).
# What the insert wrote comes back grouped, for the alert events (not 86,400 rows).
RECORDED_PER_STATEMENT = 10_000
_RECORD_POSTGRES = f"""
    WITH written AS (
        INSERT INTO {RUNS} (id, job, period, status, reason, origin, attempt, holder,
                            lease_seconds, lease_expires_at, claimed_at, finished_at)
        SELECT entry.id, :job, entry.period, entry.status, entry.reason, :origin, 1, :holder,
               :lease_seconds, NULL, statement_timestamp(), statement_timestamp()
        FROM unnest(CAST(:ids AS TEXT[]), CAST(:periods AS TIMESTAMPTZ[]),
                    CAST(:statuses AS TEXT[]), CAST(:reasons AS TEXT[]))
             AS entry(id, period, status, reason)
        ON CONFLICT (job, period) DO NOTHING
        RETURNING period, status, reason)
    SELECT status, reason, min(period) AS first, max(period) AS last, count(*) AS count
    FROM written GROUP BY status, reason
"""
# PostgreSQL: claimed periods likewise, a statement per chunk.
_CLAIM_POSTGRES = f"""
    INSERT INTO {RUNS} (id, job, period, status, reason, origin, attempt, holder,
                        lease_seconds, lease_expires_at, claimed_at, finished_at)
    SELECT entry.id, :job, entry.period, 'claimed', NULL, :origin, 1, :holder,
           :lease_seconds, clock_timestamp() + make_interval(secs => :lease_seconds),
           statement_timestamp(), NULL
    FROM unnest(CAST(:ids AS TEXT[]), CAST(:periods AS TIMESTAMPTZ[])) AS entry(id, period)
    ON CONFLICT (job, period) DO NOTHING
    RETURNING id, period
"""


def _record_postgres(
    connection: Connection,
    job: str,
    entries: Sequence[Entry],
    *,
    holder: str,
    lease_seconds: float,
    origin: Origin,
) -> list[PassedOver]:
    passed: list[Any] = []
    for start in range(0, len(entries), RECORDED_PER_STATEMENT):
        chunk = entries[start : start + RECORDED_PER_STATEMENT]
        parameters = _bulk(job, chunk, holder=holder, lease_seconds=lease_seconds, origin=origin)
        parameters["statuses"] = [entry.status.value for entry in chunk]
        parameters["reasons"] = [entry.reason.value if entry.reason else None for entry in chunk]
        passed += connection.execute(_RECORD_POSTGRES, parameters).all()
    return [PassedOver(*row) for row in passed]


def _claim_postgres(
    connection: Connection,
    job: str,
    entries: Sequence[Entry],
    *,
    holder: str,
    lease_seconds: float,
    origin: Origin,
    sent: float,
) -> list[Claim]:
    won: list[Claim] = []
    for start in range(0, len(entries), ROWS_PER_STATEMENT):
        chunk = entries[start : start + ROWS_PER_STATEMENT]
        parameters = _bulk(job, chunk, holder=holder, lease_seconds=lease_seconds, origin=origin)
        won += [
            Claim(row.id, job, row.period, 1, holder, lease_seconds, origin, sent)
            for row in connection.execute(_CLAIM_POSTGRES, parameters)
        ]
    return won


def _bulk(
    job: str, chunk: Sequence[Entry], *, holder: str, lease_seconds: float, origin: Origin
) -> dict[str, Any]:
    """PostgreSQL: what every row of a bulk insert shares, and its ids and periods."""
    return {
        "job": job,
        "origin": origin.value,
        "holder": holder,
        "lease_seconds": lease_seconds,
        "ids": [uuid.uuid4().hex for _ in chunk],
        "periods": [entry.period for entry in chunk],
    }


def _insert(database: Database, *, leased: bool) -> str:
    """SQLite: one period's row; claimed (`leased`, with `:expiry`) or recorded as passed
    over (skipped, missed: finished when written)."""
    expiry, finished = (":expiry", "NULL") if leased else ("NULL", database.now)
    return f"""
        INSERT INTO {RUNS} (id, job, period, status, reason, origin, attempt, holder,
                            lease_seconds, lease_expires_at, claimed_at, finished_at)
        VALUES (:id, :job, :period, :status, :reason, :origin, 1, :holder, :lease_seconds,
                {expiry}, {database.now}, {finished})
        ON CONFLICT (job, period) DO NOTHING
    """


def _row(
    job: str, entry: Entry, origin: Origin, lease_seconds: float, holder: str
) -> dict[str, Any]:
    return {
        "id": uuid.uuid4().hex,
        "job": job,
        "period": entry.period,
        "status": entry.status.value,
        "reason": entry.reason.value if entry.reason else None,
        "origin": origin.value,
        "lease_seconds": lease_seconds,
        "holder": holder,
    }


# PostgreSQL: many jobs' scan ranges or watermarks travel as arrays in one statement.
JOBS_PER_STATEMENT = 1000
_EXISTING_POSTGRES = f"""
    SELECT run.job, run.period
    FROM unnest(CAST(:jobs AS TEXT[]), CAST(:afters AS TIMESTAMPTZ[]),
                CAST(:uptos AS TIMESTAMPTZ[])) AS scan(job, after, upto)
    JOIN {RUNS} AS run
      ON run.job = scan.job AND run.period > scan.after AND run.period <= scan.upto
"""
_ADVANCE_POSTGRES = f"""
    UPDATE {JOBS} AS job SET caught_up_to = move.new
    FROM unnest(CAST(:names AS TEXT[]), CAST(:seen AS TIMESTAMPTZ[]),
                CAST(:new AS TIMESTAMPTZ[])) AS move(name, seen, new)
    WHERE job.name = move.name AND job.caught_up_to IS NOT DISTINCT FROM move.seen
"""


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
    current = "caught_up_to IS NULL" if seen is None else "caught_up_to = :seen"
    statement = f"UPDATE {JOBS} SET caught_up_to = :new WHERE name = :job AND {current}"
    with database.transaction() as connection:
        return connection.execute(statement, {"job": job, "seen": seen, "new": new}).rowcount == 1


def runs_between(database: Database, job: str, first: datetime, last: datetime) -> list[Stale]:
    """Every run of the job with first <= period <= last, as takeover candidates."""
    statement = f"""
        SELECT {STALE_COLUMNS} FROM {RUNS}
        WHERE job = :job AND period >= :first AND period <= :last ORDER BY period
    """
    with database.transaction() as connection:
        rows = connection.execute(statement, {"job": job, "first": first, "last": last})
        return [stale_from(row, expired=False) for row in rows]


_UNCLAIMED_POSTGRES = f"""
    SELECT due.index FROM unnest(CAST(:jobs AS TEXT[]), CAST(:periods AS TIMESTAMPTZ[]))
         WITH ORDINALITY AS due(job, period, index)
    WHERE NOT EXISTS (SELECT FROM {RUNS} AS run
                      WHERE run.job = due.job AND run.period = due.period)
"""
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
            pairs, parameters = pairs_in(
                "due",
                [(item.job, item.period) for item in due[start : start + _PAIRS_PER_STATEMENT]],
            )
            rows = connection.execute(
                f"SELECT job, period FROM {RUNS} WHERE (job, period) IN ({pairs})",
                parameters,
            )
            taken.update((job, period) for job, period in rows)
    return [item for item in due if (item.job, item.period) not in taken]
