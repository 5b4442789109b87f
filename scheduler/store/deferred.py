"""Periods catch-up deferred past a job's budget (`@job(catchup_budget=...)`): what the
budget has spent, the operator's two answers (run them, skip them), and the claim of
the periods an operator chose to run.

A deferred period is a row like any other (status `deferred`, reason `budget`), so it
is never lost and never run twice: an operator's run marks it `approved` and the next
catch-up pass of any node claims it by compare-and-set, under the job's lock.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from scheduler.model import Claim, Spent
from scheduler.states import Origin, Reason
from scheduler.store.database import Connection, Database
from scheduler.store.fence import RUNS
from scheduler.store.wakeups import Wake, notify_on

# Statuses of catch-up rows that were not claimed to run: they spend no budget.
_PASSED_OVER = "('skipped', 'missed', 'deferred')"
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
    and wait for a node, and the oldest and newest."""

    job: str
    waiting: int
    approved: int
    first: datetime
    last: datetime


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


def fleet_spent_on(database: Database, connection: Connection, per_s: float) -> Spent:
    """How many catch-up runs of any job were claimed in the last `per_s` seconds, and
    when the newest was (through the index of catch-up's claims)."""
    since, since_param = database.after("since", -per_s)
    statement = f"""
        SELECT count(*) AS runs, max(claimed_at) AS last FROM {RUNS}
        WHERE origin = 'catchup' AND claimed_at > {since} AND status NOT IN {_PASSED_OVER}
    """
    row = connection.execute(statement, since_param).one()
    return Spent(int(row.runs), row.last)


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
    all) are approved, for the next catch-up pass of any node; how many."""
    return _answer(
        database,
        job,
        oldest,
        f"reason = '{Reason.APPROVED.value}'",
    )


def skip(database: Database, job: str, oldest: int | None = None) -> int:
    """An operator's skip: the job's deferred periods (approved ones not yet claimed too)
    are recorded `skipped (budget)`, never to run; how many."""
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
    reasons = [Reason.BUDGET.value] + ([Reason.APPROVED.value] if approved_too else [])
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
               sum(CASE WHEN reason = '{Reason.APPROVED.value}' THEN 0 ELSE 1 END) AS waiting,
               sum(CASE WHEN reason = '{Reason.APPROVED.value}' THEN 1 ELSE 0 END) AS approved,
               min(period) AS first, max(period) AS last
        FROM {RUNS} WHERE {where} GROUP BY job ORDER BY job
    """
    with database.transaction() as connection:
        rows = connection.execute(statement, {"job": job} if job is not None else {})
        return [
            DeferredPeriods(row.job, int(row.waiting), int(row.approved), row.first, row.last)
            for row in rows
        ]
