"""Claiming periods and recording what became of them: the runs table's statements.

Every write after the claim is fenced on (id, attempt, holder): a node that lost
its lease learns so from a zero row count and cannot overwrite the new holder.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, bindparam, select, update

from scheduler.states import ACTIVE_STATUSES, Origin, Reason, RunStatus
from scheduler.store.database import Database
from scheduler.store.schema import runs


@dataclass(frozen=True)
class Due:
    """A period that a node wants to claim."""

    job: str
    period: datetime
    lease_seconds: float
    origin: Origin = Origin.SCHEDULE


@dataclass(frozen=True)
class Claim:
    """A period this node holds: the fencing triple plus what a dispatcher needs."""

    id: str
    job: str
    period: datetime
    attempt: int
    holder: str
    lease_seconds: float
    origin: Origin


@dataclass(frozen=True)
class Failure:
    """What went wrong in a run, trimmed for storage."""

    type: str
    message: str
    traceback: str


def claim(database: Database, due: Sequence[Due], holder: str) -> list[Claim]:
    """Claim many periods at once; return the ones this node won.

    One `INSERT … ON CONFLICT (job, period) DO NOTHING RETURNING id` for the whole
    batch (SQLAlchemy sends it as multi-row VALUES pages): a row comes back only for
    the periods nobody held, so losing is silent and costs nothing more.
    """
    if not due:
        return []
    if database.is_postgres:
        expiry = database.now_plus(bindparam("lease_seconds"))
        return _claim_rows(database, due, holder, expiry)
    # SQLite computes the lease on our clock; group by lease length to keep one value each.
    won: list[Claim] = []
    for seconds in sorted({item.lease_seconds for item in due}):
        group = [item for item in due if item.lease_seconds == seconds]
        won += _claim_rows(database, group, holder, database.now_plus(seconds))
    return won


def _claim_rows(database: Database, due: Sequence[Due], holder: str, expiry: object) -> list[Claim]:
    candidates = {uuid.uuid4().hex: item for item in due}
    statement = (
        database.insert(runs)
        .values(
            id=bindparam("id"),
            job=bindparam("job"),
            period=bindparam("period"),
            status=RunStatus.CLAIMED.value,
            origin=bindparam("origin"),
            attempt=1,
            holder=holder,
            lease_seconds=bindparam("lease_seconds"),
            lease_expires_at=expiry,
            claimed_at=database.now(),
        )
        .on_conflict_do_nothing(index_elements=["job", "period"])
        .returning(runs.c.id)
    )
    parameters = [
        {
            "id": run_id,
            "job": item.job,
            "period": item.period,
            "origin": item.origin.value,
            "lease_seconds": item.lease_seconds,
        }
        for run_id, item in candidates.items()
    ]
    with database.transaction() as connection:
        won_ids = list(connection.execute(statement, parameters).scalars())
    return [
        Claim(
            id=run_id,
            job=candidates[run_id].job,
            period=candidates[run_id].period,
            attempt=1,
            holder=holder,
            lease_seconds=candidates[run_id].lease_seconds,
            origin=candidates[run_id].origin,
        )
        for run_id in won_ids
    ]


def _fenced(claim: Claim) -> object:
    return and_(
        runs.c.id == claim.id,
        runs.c.attempt == claim.attempt,
        runs.c.holder == claim.holder,
        runs.c.status.in_([status.value for status in ACTIVE_STATUSES]),
    )


def start(database: Database, claim: Claim) -> bool:
    """Mark the run as running; False means the claim is no longer ours."""
    statement = (
        update(runs)
        .where(_fenced(claim))  # type: ignore[arg-type]
        .values(status=RunStatus.RUNNING.value, started_at=database.now())
    )
    with database.transaction() as connection:
        return connection.execute(statement).rowcount == 1


def finish(
    database: Database,
    claim: Claim,
    status: RunStatus,
    duration_ms: int,
    *,
    failure: Failure | None = None,
    reason: Reason | None = None,
) -> bool:
    """Record the outcome if we still hold the run; False means it was refused."""
    statement = (
        update(runs)
        .where(_fenced(claim))  # type: ignore[arg-type]
        .values(
            status=status.value,
            reason=reason.value if reason else None,
            finished_at=database.now(),
            duration_ms=duration_ms,
            lease_expires_at=None,
            error_type=failure.type if failure else None,
            error_message=failure.message if failure else None,
            error_traceback=failure.traceback if failure else None,
        )
    )
    with database.transaction() as connection:
        return connection.execute(statement).rowcount == 1


def renew_leases(database: Database, claims: Sequence[Claim]) -> set[str]:
    """Push the lease of each held run forward; return the ids still ours."""
    if not claims:
        return set()
    renewed: set[str] = set()
    by_lease: dict[float, list[Claim]] = {}
    for held in claims:
        by_lease.setdefault(held.lease_seconds, []).append(held)
    with database.transaction() as connection:
        for seconds, group in by_lease.items():
            statement = (
                update(runs)
                .where(
                    runs.c.id.in_([held.id for held in group]),
                    runs.c.holder == group[0].holder,
                    runs.c.status.in_([status.value for status in ACTIVE_STATUSES]),
                )
                .values(lease_expires_at=database.now_plus(seconds))
                .returning(runs.c.id, runs.c.attempt)
            )
            attempts = {held.id: held.attempt for held in group}
            renewed |= {
                run_id
                for run_id, attempt in connection.execute(statement)
                if attempts[run_id] == attempt
            }
    return renewed


def get(database: Database, job: str, period: datetime) -> dict[str, object] | None:
    """One run as a plain mapping, for the CLI and tests."""
    with database.transaction() as connection:
        row = connection.execute(
            select(runs).where(runs.c.job == job, runs.c.period == period)
        ).first()
    return dict(row._mapping) if row else None
