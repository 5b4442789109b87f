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
from typing import Any

from scheduler.model import Claim, lock_key
from scheduler.states import ACTIVE_STATUSES, RunStatus
from scheduler.store.database import Connection, Database

RUNS = "scheduler_runs"
ACTIVE = [status.value for status in ACTIVE_STATUSES]
# Statuses a run may leave again through `retry_at`.
RETRYABLE = [RunStatus.FAILED.value, RunStatus.TIMED_OUT.value, RunStatus.ABANDONED.value]
# The active statuses as SQL literals.
ACTIVE_SQL = ", ".join(f"'{status}'" for status in ACTIVE)
RETRYABLE_SQL = ", ".join(f"'{status}'" for status in RETRYABLE)
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
# alias; `now` the database clock's SQL.


def occupying_sql(now: str) -> str:
    return (
        f"(other.live AND other.status IN ({ACTIVE_SQL}, 'timed_out')"
        f" AND other.lease_expires_at > {now}"
        " AND NOT (other.origin = 'catchup' OR (other.origin = 'schedule' AND other.attempt > 1)))"
    )


OCCUPYING_SQL = occupying_sql("statement_timestamp()")

# The row is this attempt's, as claimed: same id, attempt and holder (parameters from
# `fence_params`).
MINE_SQL = "id = :fence_id AND attempt = :fence_attempt AND holder = :fence_holder"
# The row is this attempt's and still active: every write about a run needs this.
FENCED_SQL = f"{MINE_SQL} AND status IN ({ACTIVE_SQL})"


def fence_params(claim: Claim) -> dict[str, Any]:
    """The parameters of MINE_SQL and FENCED_SQL."""
    return {"fence_id": claim.id, "fence_attempt": claim.attempt, "fence_holder": claim.holder}


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
        "SELECT pg_advisory_xact_lock(k) FROM unnest(CAST(:keys AS BIGINT[])) AS k ORDER BY k",
        {"keys": keys},
    )
