"""Periods catch-up deferred past a job's budget (`@job(catchup_budget=...)`): what the
budget has spent, the operator's two answers (run them, skip them), and the claim of
the periods an operator chose to run.

A deferred period is a row like any other (status `deferred`, reason `budget`), so it
is never lost and never run twice: an operator's run marks it `approved` and the next
catch-up pass of any node claims it by compare-and-set, under the job's lock.

A schedule created at run time has no watermark to keep its late periods behind while
they wait for the budget's pace, so those within its budget are written too, `deferred
(paced)`: they count as spent (a reservation), and the catch-up loop of any node claims
the oldest at each pace by compare-and-set (`claim_paced`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduler.model import Claim, Spent
from scheduler.states import Origin, Reason
from scheduler.store import events as alert_events
from scheduler.store import job_sets
from scheduler.store.database import Connection, Database
from scheduler.store.fence import RUNS, lock_jobs
from scheduler.store.wakeups import Wake, notify_on

# Statuses of catch-up rows that were not claimed to run: they spend no budget.
_PASSED_OVER = "('skipped', 'missed', 'deferred')"
# Periods waiting for their budget's pace: spent already, as a reservation.
_PACED = f"ended_status = 'deferred' AND reason = '{Reason.PACED.value}'"
# Jobs whose paced periods one read finds (the rest in the next pass).
PACED_READ = 1000
# Approved periods one pass claims per job, and reads in all (the rest in the next
# pass, at once).
CLAIMS_PER_PASS = 1000
APPROVED_READ = 10_000


# The advisory lock a fleet's catch-up budget is spent under, beside the job's: a name
# no run's job can have (a job's never begins with `@`, and a schedule's key, which
# follows the `@` of its runs, never holds a control character).
FLEET_LOCK = "@\x1fcatch-up budget"


@dataclass(frozen=True)
class DeferredPeriods:
    """A job's deferred periods: how many wait for an operator, how many were approved
    and wait for a node, how many wait for their budget's pace (a schedule's), and the
    oldest and newest."""

    job: str
    waiting: int
    approved: int
    first: datetime
    last: datetime
    paced: int = 0


def spent_on(
    database: Database, connection: Connection, job: str, per_s: float, lookback_s: float
) -> Spent:
    """How many catch-up runs of `job` were claimed in the last `per_s` seconds, and when
    the newest was, inside the caller's transaction (which holds the job's lock).
    Catch-up runs only periods within the job's catch-up window of their claim, so only
    periods after `lookback_s` ago are read (through the primary key)."""
    since, since_param = database.after("since", -per_s)
    oldest, oldest_param = database.after("oldest", -lookback_s)
    statement = f"""
        SELECT count(*) AS runs, max(claimed_at) AS last FROM {RUNS}
        WHERE job = :job AND period > {oldest} AND origin = 'catchup'
          AND claimed_at > {since} AND status NOT IN {_PASSED_OVER}
    """
    row = connection.execute(statement, {"job": job, **since_param, **oldest_param}).one()
    return Spent(int(row.runs), row.last)


def schedule_spent_on(
    database: Database, connection: Connection, job: str, per_s: float, lookback_s: float
) -> tuple[Spent, int]:
    """`spent_on` for a schedule's runs, with its periods waiting their pace counted as
    spent; and how many wait. One statement: a paced period claimed meanwhile is counted
    once, as waiting or as spent."""
    since, since_param = database.after("since", -per_s)
    oldest, oldest_param = database.after("oldest", -lookback_s)
    spending = f"origin = 'catchup' AND claimed_at > {since} AND status NOT IN {_PASSED_OVER}"
    statement = f"""
        SELECT coalesce(sum(CASE WHEN {spending} THEN 1 ELSE 0 END), 0) AS runs,
               max(CASE WHEN {spending} THEN claimed_at END) AS last,
               coalesce(sum(CASE WHEN {_PACED} THEN 1 ELSE 0 END), 0) AS paced
        FROM {RUNS} WHERE job = :job AND period > {oldest}
    """
    row = connection.execute(statement, {"job": job, **since_param, **oldest_param}).one()
    return Spent(int(row.runs) + int(row.paced), row.last), int(row.paced)


def fleet_spent_on(database: Database, connection: Connection, per_s: float) -> Spent:
    """How many catch-up runs of any job were claimed in the last `per_s` seconds (through
    the index of catch-up's claims), with the periods waiting their pace counted as spent,
    and when the newest started."""
    since, since_param = database.after("since", -per_s)
    statement = f"""
        SELECT count(*) AS runs, max(claimed_at) AS last,
               (SELECT count(*) FROM {RUNS} WHERE {_PACED}) AS paced
        FROM {RUNS}
        WHERE origin = 'catchup' AND claimed_at > {since} AND status NOT IN {_PASSED_OVER}
    """
    row = connection.execute(statement, since_param).one()
    return Spent(int(row.runs) + int(row.paced), row.last)


def lock_fleet(database: Database, connection: Connection) -> None:
    """Take the fleet budget's lock for the rest of this transaction: before any job's
    lock (`claim_paced` takes them in this order too), so that no two wait on each other."""
    lock_jobs(database, connection, [FLEET_LOCK])


def paced_written(database: Database, connection: Connection) -> None:
    """Tell every node's catch-up loop, as this transaction commits, that periods wait
    their pace: whichever node is alive claims them (PostgreSQL; the others poll)."""
    notify_on(database, connection, Wake.CATCHUP)


def paced(database: Database) -> dict[str, datetime]:
    """The jobs with periods waiting for their budget's pace, and the oldest of each."""
    statement = f"""
        SELECT job, min(period) AS first FROM {RUNS} WHERE {_PACED}
        GROUP BY job ORDER BY job LIMIT {PACED_READ}
    """
    with database.transaction() as connection:
        return {row.job: row.first for row in connection.execute(statement)}


def claim_paced(
    database: Database,
    job: str,
    *,
    holder: str,
    lease_seconds: float,
    window: timedelta,
    fleet: bool,
    next_start: Callable[[Connection, datetime], datetime],
) -> tuple[Claim | None, datetime | None]:
    """Claim the oldest of `job`'s periods waiting their pace if `next_start` (read in
    this transaction, under the job's lock and the fleet's when `fleet`, given the
    database clock) has come; those older than the catch-up `window` are recorded
    missed. The claim (or None), and when the next may start (None: nothing waits). (A
    schedule's deletion settles its waiting periods as it commits: none is left.)"""
    sent = time.monotonic()
    now = database.now
    waiting = f"job = :job AND status = 'deferred' AND reason = '{Reason.PACED.value}'"
    too_old = f"""
        UPDATE {RUNS} SET status = 'missed', reason = '{Reason.WINDOW.value}',
            finished_at = {now}
        WHERE {waiting} AND period < :window_start
        RETURNING period, status, reason
    """
    lease, leased = database.lease("lease_until", lease_seconds)
    claim = f"""
        UPDATE {RUNS} SET status = 'claimed', reason = NULL, holder = :holder,
            origin = '{Origin.CATCHUP.value}', lease_seconds = :lease_seconds,
            lease_expires_at = {lease}, claimed_at = {now}, finished_at = NULL
        WHERE {waiting} AND period = (SELECT min(period) FROM {RUNS} WHERE {waiting})
        RETURNING id, period, attempt
    """
    left = f"SELECT min(period) AS first FROM {RUNS} WHERE {waiting}"
    with database.guarded(jobs=[FLEET_LOCK] if fleet else [job]) as guarded:
        connection = guarded.connection
        parameters = {"job": job, "window_start": guarded.began - window}
        if fleet:
            lock_jobs(database, connection, [job])
        found = connection.execute(too_old, parameters)
        written = [(row.period, row.status, row.reason) for row in found]
        alert_events.passed_over(database, connection, job, alert_events.grouped(written))
        start = next_start(connection, guarded.began)
        won = None
        if start <= guarded.began:
            row = connection.execute(
                claim, {**parameters, "holder": holder, "lease_seconds": lease_seconds, **leased}
            ).first()
            if row is not None:
                won = Claim(
                    row.id,
                    job,
                    row.period,
                    row.attempt,
                    holder,
                    lease_seconds,
                    Origin.CATCHUP,
                    sent,
                )
                start = next_start(connection, guarded.began)
        first = connection.execute(left, parameters).scalar()
    return won, (start if first is not None else None)


def approved(database: Database) -> dict[str, list[datetime]]:
    """The periods operators chose to run and no node has claimed yet, per job."""
    statement = f"""
        SELECT job, period FROM {RUNS}
        WHERE ended_status = 'deferred' AND reason = '{Reason.APPROVED.value}'
        ORDER BY job, period LIMIT {APPROVED_READ}
    """
    found: dict[str, list[datetime]] = {}
    with database.transaction() as connection:
        for row in connection.execute(statement):
            found.setdefault(row.job, []).append(row.period)
    return found


def claim_approved(
    database: Database, job: str, periods: Sequence[datetime], *, holder: str, lease_seconds: float
) -> list[Claim]:
    """Claim approved periods of `job` as manual runs (an operator's word, outside the
    budget, which counts catch-up runs only), oldest first; the ones this node won
    (another node's pass may have been faster)."""
    sent = time.monotonic()
    won: list[Claim] = []
    lease, leased = database.lease("lease_until", lease_seconds)
    statement = f"""
        UPDATE {RUNS} SET status = 'claimed', reason = NULL, holder = :holder,
            origin = '{Origin.MANUAL.value}', lease_seconds = :lease_seconds,
            lease_expires_at = {lease}, claimed_at = {database.now}, finished_at = NULL
        WHERE job = :job AND period = :period
          AND status = 'deferred' AND reason = '{Reason.APPROVED.value}'
        RETURNING id, attempt
    """
    with database.guarded(jobs=[job]) as guarded:
        connection = guarded.connection
        for period in sorted(periods)[:CLAIMS_PER_PASS]:
            parameters = {
                "job": job,
                "period": period,
                "holder": holder,
                "lease_seconds": lease_seconds,
                **leased,
            }
            row = connection.execute(statement, parameters).first()
            if row is not None:
                won.append(
                    Claim(
                        row.id,
                        job,
                        period,
                        row.attempt,
                        holder,
                        lease_seconds,
                        Origin.MANUAL,
                        sent,
                    )
                )
    return won


def approve(database: Database, job: str, oldest: int | None = None) -> int:
    """An operator's run: the job's periods deferred by its budget (the `oldest` N, or
    all; those waiting their pace too) are approved, for the next catch-up pass of any
    node; how many."""
    return _answer(database, job, oldest, f"reason = '{Reason.APPROVED.value}'")


def skip(database: Database, job: str, oldest: int | None = None) -> int:
    """An operator's skip: the job's deferred periods (approved ones not yet claimed, and
    those waiting their pace, too) are recorded `skipped (budget)`, never to run; how
    many."""
    return _answer(
        database,
        job,
        oldest,
        f"status = 'skipped', reason = '{Reason.BUDGET.value}'",
        approved_too=True,
    )


def _answer(
    database: Database, job: str, oldest: int | None, change: str, *, approved_too: bool = False
) -> int:
    reasons = [Reason.BUDGET.value, Reason.PACED.value]
    reasons += [Reason.APPROVED.value] if approved_too else []
    listed = ", ".join(f"'{reason}'" for reason in reasons)
    chosen = f"""
        SELECT period FROM {RUNS}
        WHERE job = :job AND ended_status = 'deferred' AND reason IN ({listed})
        ORDER BY period {"LIMIT :oldest" if oldest is not None else ""}
    """
    statement = f"""
        UPDATE {RUNS} SET {change}, finished_at = {database.now}
        WHERE job = :job AND status = 'deferred' AND reason IN ({listed})
          AND period IN ({chosen})
    """
    parameters: dict[str, object] = {"job": job}
    if oldest is not None:
        parameters["oldest"] = oldest
    with database.guarded(jobs=[job]) as guarded:
        connection = guarded.connection
        changed = connection.execute(statement, parameters).rowcount
        if changed:
            notify_on(database, connection, Wake.CATCHUP)
    return int(changed)


def deferred_periods(database: Database, job: str | None = None) -> list[DeferredPeriods]:
    """Per job (or the one job): its deferred periods, waiting and approved."""
    where = "ended_status = 'deferred'" + (" AND job = :job" if job is not None else "")
    statement = f"""
        SELECT job,
               sum(CASE WHEN reason = '{Reason.BUDGET.value}' THEN 1 ELSE 0 END) AS waiting,
               sum(CASE WHEN reason = '{Reason.APPROVED.value}' THEN 1 ELSE 0 END) AS approved,
               sum(CASE WHEN reason = '{Reason.PACED.value}' THEN 1 ELSE 0 END) AS paced,
               min(period) AS first, max(period) AS last
        FROM {RUNS} WHERE {where} GROUP BY job ORDER BY job
    """
    with database.transaction() as connection:
        rows = connection.execute(statement, {"job": job} if job is not None else {})
        return [
            DeferredPeriods(
                row.job, int(row.waiting), int(row.approved), row.first, row.last, int(row.paced)
            )
            for row in rows
        ]


def deferred_by_code_job(database: Database) -> dict[str, int]:
    """Periods waiting for an operator or approved (not those waiting their pace), per
    code-declared job: a schedule's (`@<key>`) counted under the job its row names (its
    template), so that the answer has a line per job, however many schedules there are.
    A schedule whose row is gone is left out."""
    statement = f"""
        SELECT job, count(*) AS deferred FROM (
            SELECT {job_sets.code_job("run")} AS job
            FROM {RUNS} AS run
            WHERE run.ended_status = 'deferred'
              AND run.reason IN ('{Reason.BUDGET.value}', '{Reason.APPROVED.value}')
        ) AS found
        GROUP BY job
    """
    with database.transaction() as connection:
        return {
            row.job: int(row.deferred)
            for row in connection.execute(statement, {})
            if row.job is not None
        }
