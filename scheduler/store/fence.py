"""The rules every run write shares: the fence, the job's lock, and what occupies a job.

- The fence: every write after the claim is conditional on (run id, attempt, holder) and
  on the run still being active. A node that lost its lease learns so from a zero row
  count and cannot overwrite the new holder. Items and checkpoints are fenced alike.
- The job's lock: claims, starts of runs that take their turn, catch-up inserts and
  takeovers of one job are serialised by a transaction-scoped advisory lock, so that
  none of them misses a row another has just written.
- Occupying: which other runs of a job make a period that falls due skip (or queue)
  for overlap.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, literal_column, or_, text

from scheduler.model import Claim, lock_key
from scheduler.states import ACTIVE_STATUSES, Origin, RunStatus
from scheduler.store.database import Database
from scheduler.store.schema import runs

ACTIVE = [status.value for status in ACTIVE_STATUSES]
# Statuses a run may leave again through `retry_at`.
RETRYABLE = [RunStatus.FAILED.value, RunStatus.TIMED_OUT.value, RunStatus.ABANDONED.value]
# The active statuses as SQL literals, for statements written as text.
ACTIVE_SQL = ", ".join(f"'{status}'" for status in ACTIVE)
# A run occupies its job, so that a period falling due meanwhile is skipped (or queued)
# for overlap, while it is claimed or running, or timed out with its function still
# running, under a live lease, and is on time: a dead holder (its lease ran out, or was
# ended when its node was found gone) costs the job's later periods nothing, nor does
# the scheduler's own late work (a catch-up, a retry or a takeover of a scheduled
# period): those periods wait behind it instead, one at a time, and since an on-time
# period waiting so occupies the job, no more pile up than the policy allows. Only an
# earlier period occupies a period (the claim statements compare the periods): P fell
# due before P+1 existed, so a P claimed late as a peer's leftover, after P+1, runs
# (oldest first) instead of being skipped behind P+1. `other` is the occupying run's
# alias.
OCCUPYING_SQL = (
    f"(other.status IN ({ACTIVE_SQL}, 'timed_out')"
    " AND other.lease_expires_at > statement_timestamp()"
    " AND NOT (other.origin = 'catchup' OR (other.origin = 'schedule' AND other.attempt > 1)))"
)


def mine(claim: Claim, table: Any = runs) -> ColumnElement[bool]:
    """The row is this attempt's, as claimed: same id, attempt and holder."""
    return and_(
        table.c.id == claim.id,
        table.c.attempt == claim.attempt,
        table.c.holder == claim.holder,
    )


def fenced(claim: Claim, table: Any = runs) -> ColumnElement[bool]:
    """The row is this attempt's and still active: every write about a run needs this."""
    return and_(mine(claim, table), table.c.status.in_(ACTIVE))


def occupying(other: Any, now: ColumnElement[datetime]) -> ColumnElement[bool]:
    """OCCUPYING_SQL for statements built with SQLAlchemy Core (`other` an alias)."""
    statuses = [*ACTIVE, RunStatus.TIMED_OUT.value]
    late = or_(
        other.c.origin == Origin.CATCHUP.value,
        and_(other.c.origin == Origin.SCHEDULE.value, other.c.attempt > 1),
    )
    return and_(
        other.c.status.in_([literal_column(f"'{status}'") for status in statuses]),
        other.c.lease_expires_at > now,
        ~late,
    )


def fence_of(claim: Claim) -> tuple[str, int, str]:
    return (claim.id, claim.attempt, claim.holder)


def fence_arrays(claims: Sequence[Claim]) -> dict[str, list[Any]]:
    """The fences of many claims as one array a column, for statements that `unnest`."""
    return {
        "ids": [claim.id for claim in claims],
        "attempts": [claim.attempt for claim in claims],
        "holders": [claim.holder for claim in claims],
    }


def lock_jobs(database: Database, connection: Connection, jobs: Collection[str]) -> None:
    """Serialise this transaction with every other that claims, starts, retakes or
    inserts a run of these jobs (a single writer needs no lock). Taken in key order in
    one statement: no deadlock."""
    if not database.job_locks or not jobs:
        return
    keys = sorted({lock_key(job) for job in jobs})
    connection.execute(
        text(
            "SELECT pg_advisory_xact_lock(k) FROM unnest(CAST(:keys AS BIGINT[])) AS k ORDER BY k"
        ),
        {"keys": keys},
    )
