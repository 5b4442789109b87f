"""The rules every run write shares: the fence, the job's lock, and what occupies a job.

- The fence: every write after the claim is conditional on (run id, attempt, holder) and
  on the run still being active. A node that lost its lease learns so from a zero row
  count and cannot overwrite the new holder. Items and checkpoints are fenced alike.
- The job's lock: claims, starts of runs that take their turn, catch-up inserts and
  takeovers of one job are serialised by a transaction-scoped advisory lock, so that
  none of them misses a row another has just written.
- Occupying: which other runs of a job make a period that falls due skip (or queue)
  for overlap.
- The order of row locks: a write of many runs locks them in id order.
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
# The scheduler's own late work: a catch-up, a retry or a takeover of a scheduled period.
LATE_WORK_SQL = "(other.origin = 'catchup' OR (other.origin = 'schedule' AND other.attempt > 1))"
# Overlap: a period is skipped only while a body of an earlier period of its job runs
# that was running when the period fell due (its holder had said the body began,
# `began_at`, no later than the period's instant: a start whose commit its holder never
# heard of marks a run running whose body may never run), under a holder alive by
# every evidence: its lease live, its liveness lock
# held where it has one (`doubtful` names the holders whose lock went: the claim
# statements read them once), and its function not known to have returned (a holder's
# own claim names its runs whose outcome is still being written, `:returned`). Then it
# is skipped once the job's occupants reach the overlap limit (1 for `skip`, 2 for
# `queue`): such a body of the job's own counts, and so do its on-time periods already
# waiting their turn; the scheduler's late work (a catch-up, a retry, a takeover),
# running or waiting, does not. So behind an on-time body the next period is skipped at
# once; behind late work (a restart's retaken backlog, say) the first waits and only the
# next is skipped; and nothing else ever makes a period skip:
# a claim not started (a stall's backlog), a start not yet known to have begun its body,
# a body that began after the period fell due (a peer's leftover claimed late), a
# function its own node knows has returned, a holder in doubt. (A peer cannot know that
# a function returned until its outcome commits: in that window, milliseconds unless
# the holder's write waits, its claim sees the body running and skips.)
# Those periods wait their turn instead and run oldest first. `other` is the earlier
# run's alias, `now` the database clock's SQL, `period` the new period's.


def running_body_sql(now: str, period: str, returned: str, doubtful: str) -> str:
    """A body of `other` that was running at `period` and still is, under a live holder.
    `returned`: SQL true for an id this node knows has returned; `doubtful`: SQL true for
    a holder whose liveness lock went."""
    return (
        f"(other.live AND other.status IN ('running', 'timed_out')"
        f" AND other.lease_expires_at > {now} AND other.began_at <= {period}"
        f" AND NOT ({returned}) AND NOT ({doubtful}))"
    )


def occupant_sql(now: str, running_body: str) -> str:
    """`other` counts toward the overlap limit: an on-time running body, or an on-time
    period waiting its turn under a live lease."""
    return f"(({running_body} OR {waiting_sql(now)}) AND NOT {LATE_WORK_SQL})"


def waiting_sql(now: str) -> str:
    """`other` waits to start (or for its worker) under a live lease."""
    return (
        f"(other.live AND other.status IN ('claimed', 'queued') AND other.lease_expires_at > {now})"
    )


# A batch write of runs that may meet a renewal of the same rows in another process
# locks them in id order before it writes them (`locked`: whatever plan the update
# takes, a row is written only once the ids before it are locked), as the renewal does
# (`store.renewals`): the two then never deadlock, which PostgreSQL would break only
# after `deadlock_timeout`. A node's own starts, outcomes and word of begun bodies skip
# this write of each row (a third of the server's CPU a run at a peak): within the
# process, they and the renewals take turns instead (`store.batch_gate`).
LOCK_IN_ORDER_SQL = f"""SELECT id FROM {RUNS}
    WHERE id = ANY(CAST(:ids AS TEXT[])) AND holder = ANY(CAST(:holders AS TEXT[]))
    ORDER BY id FOR NO KEY UPDATE"""

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
