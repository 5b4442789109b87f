"""Claiming periods and recording what became of them: the runs table's statements.

Every write after the claim is fenced on (id, attempt, holder): a node that lost
its lease learns so from a zero row count and cannot overwrite the new holder. Every
fenced write is also idempotent for its own holder: a write whose commit succeeded
but whose reply was lost finds, when it is tried again, that it already happened.

Times compared in a WHERE clause are the statement's start (`Database.now`); a lease
is written from the clock at the moment of writing (`Database.lease_until`), after
any lock wait, so it is never shorter than asked for.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Select,
    and_,
    bindparam,
    case,
    exists,
    func,
    literal,
    literal_column,
    null,
    or_,
    select,
    text,
    tuple_,
    update,
)

from scheduler.states import ACTIVE_STATUSES, Origin, Reason, RunStatus
from scheduler.store.database import Database
from scheduler.store.schema import attempts, jobs, runs

ACTIVE = [status.value for status in ACTIVE_STATUSES]
# Statuses a run may leave again through `retry_at`.
RETRYABLE = [RunStatus.FAILED.value, RunStatus.TIMED_OUT.value, RunStatus.ABANDONED.value]
# Advisory locks count against PostgreSQL's shared lock table; keep each transaction modest.
JOBS_PER_TRANSACTION = 500
# How far ahead of the database clock a period may be and still be claimed: the host
# clocks of nodes and the database's never agree to the microsecond.
FUTURE_TOLERANCE = timedelta(seconds=2)
# (run id, attempt): the fencing pair that names one attempt of a run.
RunKey = tuple[str, int]
_other = runs.alias("other")
# The active statuses as SQL literals, for statements written as text.
_ACTIVE_SQL = ", ".join(f"'{status}'" for status in ACTIVE)
# A run occupies its job, so that a period falling due meanwhile is skipped (or queued)
# for overlap, while it is claimed or running, or timed out with its function still
# running, under a live lease, and is on time: a dead holder (its lease ran out, or was
# ended when its node was found gone) costs the job's later periods nothing, nor does
# the scheduler's own late work (a catch-up, a retry or a takeover of a scheduled
# period): those periods wait behind it instead, one at a time, and since an on-time
# period waiting so occupies the job, no more pile up than the policy allows.
_OCCUPYING_SQL = (
    f"(other.status IN ({_ACTIVE_SQL}, 'timed_out')"
    " AND other.lease_expires_at > statement_timestamp()"
    " AND NOT (other.origin = 'catchup' OR (other.origin = 'schedule' AND other.attempt > 1)))"
)


@dataclass(frozen=True)
class Due:
    """A period that a node wants to claim.

    `overlap_limit` is how many other active runs of the job may exist before this
    period is recorded as skipped (1 for `skip`, 2 for `queue`); None allows any.
    """

    job: str
    period: datetime
    lease_seconds: float
    overlap_limit: int | None = 1
    origin: Origin = Origin.SCHEDULE


@dataclass(frozen=True)
class Claim:
    """A period this node holds: the fencing triple plus what a dispatcher needs.

    `lease_from` is this process's monotonic clock just before the statement that gave
    the lease was sent: the lease cannot end before `lease_from + lease_seconds` by that
    clock, which is how the holder knows, without asking, until when it is safe.
    """

    id: str
    job: str
    period: datetime
    attempt: int
    holder: str
    lease_seconds: float
    origin: Origin
    lease_from: float = field(default=0.0, compare=False)
    # Earlier attempts of the period that called the function (not those given back
    # before they started): what counts against the job's retries.
    starts_before: int = 0

    @property
    def key(self) -> RunKey:
        """One attempt of one run: a node may hold a later attempt of a run it lost."""
        return (self.id, self.attempt)


@dataclass(frozen=True)
class ClaimResult:
    won: list[Claim]
    skipped: list[Claim]
    reasons: dict[str, Reason] = field(default_factory=dict)
    # Periods not claimed because the database clock has not reached them yet.
    early: list[Due] = field(default_factory=list)


@dataclass(frozen=True)
class Failure:
    """What went wrong in a run, trimmed for storage. `trace` is the traceback as data
    (each exception of the chain: type, value, frames), for the log; it is not stored."""

    type: str
    message: str
    traceback: str
    trace: tuple[dict[str, Any], ...] = field(default=(), compare=False)


def job_lock_key(job: str) -> int:
    """A stable signed 64-bit key per job, the same on every node and Python version."""
    digest = hashlib.blake2b(f"scheduler:{job}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def lock_jobs(database: Database, connection: Connection, jobs: Collection[str]) -> None:
    """Serialise this transaction with every other that claims, starts, retakes or
    inserts a run of these jobs (PostgreSQL; SQLite has one writer at a time anyway).
    Taken in key order in one statement: no deadlock."""
    if not database.is_postgres or not jobs:
        return
    keys = sorted({job_lock_key(job) for job in jobs})
    connection.execute(
        text(
            "SELECT pg_advisory_xact_lock(k) FROM unnest(CAST(:keys AS BIGINT[])) AS k ORDER BY k"
        ),
        {"keys": keys},
    )


# -- claims ---------------------------------------------------------------------------


def claim(
    database: Database,
    due: Sequence[Due],
    holder: str,
    committed: Callable[[ClaimResult], None] | None = None,
    *,
    adopt: bool = False,
) -> ClaimResult:
    """Claim many periods at once; return the ones this node won, and those it skipped.

    One `INSERT … ON CONFLICT (job, period) DO NOTHING RETURNING` per chunk (on
    PostgreSQL the periods travel as arrays; SQLite takes a row at a time): a row comes
    back only for the periods nobody held, so losing is silent. A period whose job is
    still running elsewhere is inserted as `skipped` (reason overlap) by the same
    statement; that check is serialised per job by transaction-scoped advisory locks, so
    no lock outlives the statement and nothing depends on a session. Each period is
    judged against the runs outside its own batch, so a backlog claimed together (after
    a stall) is not skipped because of its own neighbours; the dispatcher then runs it
    one period at a time. A period ahead of the database clock (beyond
    FUTURE_TOLERANCE) is not claimed but returned in `early`.

    `adopt`, for a claim tried again after a fault: periods this holder already claimed
    (the commit landed but its reply was lost) are returned as won, not as lost.
    """
    result = ClaimResult([], [])
    chunks = list(_chunks_by_job(due))
    # Every node cuts the same chunks but takes them in an order of its own, so that
    # replicas claiming one big batch win different chunks side by side instead of
    # queueing behind whichever node locked the first chunk (which then won them all).
    # `committed` hears of each chunk's claims once they are committed, so that a caller
    # can run them even when a later chunk fails.
    for chunk in random.sample(chunks, len(chunks)):
        part = ClaimResult([], [])
        sent = time.monotonic()
        with database.guarded() as guarded:
            connection = guarded.connection
            if any(item.overlap_limit is not None for item in chunk):
                lock_jobs(database, connection, {item.job for item in chunk})
            horizon = guarded.began + FUTURE_TOLERANCE
            ready = [item for item in chunk if item.period <= horizon]
            part.early.extend(item for item in chunk if item.period > horizon)
            # Adopted rows belong to this batch: the others are not judged against them.
            if adopt:
                _adopt(database, connection, ready, holder, sent=sent, result=part)
            mine = {(claim.job, claim.period) for claim in part.won}
            fresh = [item for item in ready if (item.job, item.period) not in mine]
            ours = [claim.id for claim in part.won]
            if database.is_postgres:
                _insert_claims_postgres(
                    connection, fresh, holder, sent=sent, result=part, ours=ours
                )
            else:
                for group in _statement_groups(fresh):
                    _insert_claims(
                        database, connection, group, holder, sent=sent, result=part, ours=ours
                    )
        result.won.extend(part.won)
        result.skipped.extend(part.skipped)
        result.reasons.update(part.reasons)
        result.early.extend(part.early)
        if committed is not None:
            committed(part)
    return result


def _chunks_by_job(due: Sequence[Due]) -> Iterator[list[Due]]:
    """Split a batch so that no transaction locks more than JOBS_PER_TRANSACTION jobs."""
    chunk: list[Due] = []
    jobs: set[str] = set()
    for item in sorted(due, key=lambda item: (item.job, item.period)):
        if item.job not in jobs and len(jobs) >= JOBS_PER_TRANSACTION:
            yield chunk
            chunk, jobs = [], set()
        chunk.append(item)
        jobs.add(item.job)
    if chunk:
        yield chunk


def _statement_groups(due: Sequence[Due]) -> Iterator[list[Due]]:
    """SQLite rows that share one statement shape: with or without the overlap check,
    and the same lease length (SQLite's lease is a value computed here)."""
    groups: dict[tuple[bool, float], list[Due]] = {}
    for item in due:
        groups.setdefault((item.overlap_limit is None, item.lease_seconds), []).append(item)
    yield from groups.values()


def _occupying(now: ColumnElement[datetime]) -> ColumnElement[bool]:
    """SQLite's form of _OCCUPYING_SQL."""
    statuses = [*ACTIVE, RunStatus.TIMED_OUT.value]
    late = or_(
        _other.c.origin == Origin.CATCHUP.value,
        and_(_other.c.origin == Origin.SCHEDULE.value, _other.c.attempt > 1),
    )
    return and_(
        _other.c.status.in_([literal_column(f"'{status}'") for status in statuses]),
        _other.c.lease_expires_at > now,
        ~late,
    )


def _insert_claims(
    database: Database,
    connection: Connection,
    due: list[Due],
    holder: str,
    *,
    sent: float,
    result: ClaimResult,
    ours: Sequence[str] = (),
) -> None:
    """SQLite: an executemany of one INSERT, each row judged by its own subquery. The
    batch's own rows (and `ours`, adopted into it) are left out of the overlap count (a
    JSON list of their ids, one parameter for every row), as PostgreSQL's single
    statement cannot see them."""
    if not due:
        return
    now = database.now()
    expiry = database.lease_until(due[0].lease_seconds)
    candidates = {uuid.uuid4().hex: item for item in due}
    if due[0].overlap_limit is None:
        overlapping: ColumnElement[bool] = bindparam("never", False)
    else:
        batch: Select[tuple[Any]] = select(literal_column("value")).select_from(
            func.json_each(bindparam("batch"))
        )
        others_active = (
            select(func.count())
            .select_from(_other)
            .where(
                _other.c.job == bindparam("job"),
                _other.c.period != bindparam("period"),
                _other.c.id.not_in(batch),
                _occupying(now),
            )
            .scalar_subquery()
        )
        overlapping = others_active >= bindparam("overlap_limit")
    # Pause lives in the database, so every node honours it from the next claim on.
    paused = exists().where(jobs.c.name == bindparam("job"), jobs.c.paused.is_(True))
    skipped = or_(paused, overlapping)
    statement = (
        database.insert(runs)
        .values(
            id=bindparam("id"),
            job=bindparam("job"),
            period=bindparam("period"),
            status=case((skipped, RunStatus.SKIPPED.value), else_=RunStatus.CLAIMED.value),
            reason=case(
                (paused, Reason.PAUSED.value), (overlapping, Reason.OVERLAP.value), else_=null()
            ),
            origin=bindparam("origin"),
            attempt=1,
            started_attempts=0,
            holder=holder,
            lease_seconds=bindparam("lease_seconds"),
            lease_expires_at=case((skipped, null()), else_=expiry),
            claimed_at=now,
            finished_at=case((skipped, now), else_=null()),
        )
        .on_conflict_do_nothing(index_elements=["job", "period"])
        .returning(runs.c.id, runs.c.status, runs.c.reason)
    )
    batch_ids = json.dumps([*candidates, *ours])
    parameters = [
        {
            "id": run_id,
            "job": item.job,
            "period": item.period,
            "origin": item.origin.value,
            "lease_seconds": item.lease_seconds,
            "overlap_limit": item.overlap_limit or 0,
            "never": False,
            "batch": batch_ids,
        }
        for run_id, item in candidates.items()
    ]
    _collect(candidates, connection.execute(statement, parameters), holder, sent, result)


def _collect(
    candidates: dict[str, Due], rows: Iterable[Any], holder: str, sent: float, result: ClaimResult
) -> None:
    """Sort the rows an insert returned (id, status, reason) into won and skipped."""
    for run_id, status, reason in rows:
        item = candidates[run_id]
        claimed = Claim(
            run_id, item.job, item.period, 1, holder, item.lease_seconds, item.origin, sent
        )
        if status == RunStatus.SKIPPED:
            result.skipped.append(claimed)
            result.reasons[run_id] = Reason(reason)
        else:
            result.won.append(claimed)


# PostgreSQL: the periods travel as one array per column and the statement text is the
# same for any batch size, so the server parses and plans it once instead of once per
# row (a multi-row VALUES with the overlap subqueries repeated in each row took about
# 2 s to plan for 1,000 periods). Paused beats overlap; a NULL limit allows any. The
# overlap count cannot see the rows this statement inserts: each period is judged
# against the runs outside its batch.
_CLAIM_POSTGRES = text(
    f"""
    INSERT INTO {runs.name} (id, job, period, status, reason, origin, attempt,
                             started_attempts, holder, lease_seconds, lease_expires_at,
                             claimed_at, finished_at)
    SELECT due.id, due.job, due.period,
           CASE WHEN verdict.reason IS NULL THEN 'claimed' ELSE 'skipped' END,
           verdict.reason, due.origin, 1, 0, :holder, due.lease_seconds,
           CASE WHEN verdict.reason IS NULL
                THEN clock_timestamp() + make_interval(secs => due.lease_seconds) END,
           statement_timestamp(),
           CASE WHEN verdict.reason IS NOT NULL THEN statement_timestamp() END
    FROM unnest(CAST(:ids AS TEXT[]), CAST(:jobs AS TEXT[]), CAST(:periods AS TIMESTAMPTZ[]),
                CAST(:origins AS TEXT[]), CAST(:leases AS FLOAT8[]), CAST(:limits AS INT[]))
         AS due(id, job, period, origin, lease_seconds, overlap_limit)
    CROSS JOIN LATERAL (
        SELECT CASE
            WHEN EXISTS (SELECT FROM {jobs.name} AS job
                         WHERE job.name = due.job AND job.paused) THEN 'paused'
            WHEN due.overlap_limit IS NOT NULL
                 AND (SELECT count(*) FROM {runs.name} AS other
                      WHERE other.job = due.job AND other.period <> due.period
                        AND other.id <> ALL(CAST(:ours AS TEXT[])) AND {_OCCUPYING_SQL}
                     ) >= due.overlap_limit THEN 'overlap'
        END AS reason
    ) AS verdict
    WHERE due.period <= statement_timestamp() + make_interval(secs => :tolerance)
    ON CONFLICT (job, period) DO NOTHING
    RETURNING id, status, reason
    """  # noqa: S608 - table names and statuses are our constants; values are parameters
)


def _insert_claims_postgres(
    connection: Connection,
    due: list[Due],
    holder: str,
    *,
    sent: float,
    result: ClaimResult,
    ours: Sequence[str],
) -> None:
    if not due:
        return
    candidates = {uuid.uuid4().hex: item for item in due}
    rows = connection.execute(
        _CLAIM_POSTGRES,
        {
            "holder": holder,
            "ours": list(ours),
            "tolerance": FUTURE_TOLERANCE.total_seconds(),
            "ids": list(candidates),
            "jobs": [item.job for item in due],
            "periods": [item.period for item in due],
            "origins": [item.origin.value for item in due],
            "leases": [item.lease_seconds for item in due],
            "limits": [item.overlap_limit for item in due],
        },
    )
    _collect(candidates, rows, holder, sent, result)


def _adopt(
    database: Database,
    connection: Connection,
    due: Sequence[Due],
    holder: str,
    *,
    sent: float,
    result: ClaimResult,
) -> None:
    """Add to `won` the periods of `due` that this holder claimed before without hearing
    back: a row in `claimed` with its name on it can only be its own lost claim."""
    wanted = [(item.job, item.period) for item in due]
    if not wanted:
        return
    now = database.now()
    statement = select(
        runs.c.id,
        runs.c.job,
        runs.c.period,
        runs.c.lease_seconds,
        runs.c.origin,
        runs.c.started_attempts,
        (func.julianday(runs.c.lease_expires_at) - func.julianday(now)).label("left_days")
        if not database.is_postgres
        else func.extract("epoch", runs.c.lease_expires_at - now).label("left_s"),
    ).where(
        tuple_(runs.c.job, runs.c.period).in_(wanted),
        runs.c.holder == holder,
        runs.c.status == RunStatus.CLAIMED.value,
        runs.c.attempt == 1,
        runs.c.lease_expires_at > now,
    )
    for row in connection.execute(statement):
        left = float(row[6]) * (86400 if not database.is_postgres else 1)
        # The lease ends `left` seconds after this statement began, which was after `sent`.
        lease_from = sent + left - row.lease_seconds
        result.won.append(
            Claim(
                row.id,
                row.job,
                row.period,
                1,
                holder,
                row.lease_seconds,
                Origin(row.origin),
                lease_from,
                row.started_attempts,
            )
        )


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
        if database.is_postgres:
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


# -- fenced writes: start, finish, renew ----------------------------------------------


def _fenced(claim: Claim) -> ColumnElement[bool]:
    return and_(
        runs.c.id == claim.id,
        runs.c.attempt == claim.attempt,
        runs.c.holder == claim.holder,
        runs.c.status.in_(ACTIVE),
    )


class Start(Enum):
    STARTED = "started"
    WAIT = "wait"
    LOST = "lost"


@dataclass(frozen=True)
class StartRequest:
    """Mark a held run as running. `after_earlier` (any overlap but `allow`): only when
    no other period of the job is running and no earlier one waits; otherwise WAIT."""

    claim: Claim
    after_earlier: bool = False


@dataclass(frozen=True)
class Finish:
    """How an attempt ended. `retry_in` marks the period for another attempt after that
    many seconds; any node's recovery pass may take it then. `lingering`: the function
    still runs (a thread past its timeout), so the holder keeps the lease (and renews
    it) until `release` says it returned, and the retry waits for that."""

    claim: Claim
    status: RunStatus
    duration_ms: int | None
    failure: Failure | None = None
    reason: Reason | None = None
    retry_in: float | None = None
    lingering: bool = False
    # Only if the run has not started (a claim given back): a start that landed first
    # keeps the run.
    waiting_only: bool = False


def start(database: Database, claim: Claim, *, after_earlier: bool = False) -> Start:
    """Mark one run as running if it is still ours (see `record`)."""
    _, (started,) = record(database, [], [StartRequest(claim, after_earlier)])
    return started


def finish(
    database: Database,
    claim: Claim,
    status: RunStatus,
    duration_ms: int | None,
    *,
    failure: Failure | None = None,
    reason: Reason | None = None,
    retry_in: float | None = None,
) -> bool:
    """Record one outcome if we still hold the run; False means it was refused."""
    (applied,), _ = record(
        database, [Finish(claim, status, duration_ms, failure, reason, retry_in)], []
    )
    return applied


def record(
    database: Database, outcomes: Sequence[Finish], starts: Sequence[StartRequest]
) -> tuple[list[bool], list[Start]]:
    """Write many outcomes, then many starts; each row fenced on (id, attempt, holder)
    on its own, so one refused row does not refuse the others.

    Outcomes go first so that a queued period may start right after the period it
    waited for ends. A start also needs a live lease, renews it, and is idempotent: a
    run already running under the same fence (this very start, whose reply was lost)
    counts as started. A start that must wait its turn (`after_earlier`) takes its job's
    advisory lock first, so that no period of the job is inserted or started unseen
    meanwhile; without such starts, PostgreSQL takes each kind in one statement in
    autocommit (one round trip each). SQLite, local and single-writer, takes a
    statement a row inside one transaction.
    """
    ordered = {request.claim.job for request in starts if request.after_earlier}
    if database.is_postgres and not ordered:
        with database.autocommit() as connection:
            return _finish_postgres(connection, outcomes), _start_postgres(connection, starts)
    if database.is_postgres:
        with database.guarded() as guarded:
            lock_jobs(database, guarded.connection, ordered)
            applied = _finish_postgres(guarded.connection, outcomes)
            return applied, _start_postgres(guarded.connection, starts)
    with database.transaction() as connection:
        applied = [_finish_one(database, connection, outcome) for outcome in outcomes]
        started = [_start_one(database, connection, request) for request in starts]
    return applied, started


def _earlier_active(database: Database, job: Any, run_id: Any, period: Any) -> ColumnElement[bool]:
    """Another period of the job runs (or lingers), or an earlier one waits, under a
    live lease."""
    return exists().where(
        _other.c.job == job,
        _other.c.id != run_id,
        _other.c.lease_expires_at > database.now(),
        or_(
            _other.c.status.in_([RunStatus.RUNNING.value, RunStatus.TIMED_OUT.value]),
            and_(_other.c.status == RunStatus.CLAIMED.value, _other.c.period < period),
        ),
    )


def _start_one(database: Database, connection: Connection, request: StartRequest) -> Start:
    claim = request.claim
    mine = and_(
        runs.c.id == claim.id, runs.c.attempt == claim.attempt, runs.c.holder == claim.holder
    )
    again = connection.execute(
        update(runs)
        .where(mine, runs.c.status == RunStatus.RUNNING.value)
        .values(lease_expires_at=database.lease_until(claim.lease_seconds))
    )
    if again.rowcount == 1:
        return Start.STARTED
    conditions = [
        mine,
        runs.c.status == RunStatus.CLAIMED.value,
        runs.c.lease_expires_at > database.now(),
    ]
    if request.after_earlier:
        conditions.append(~_earlier_active(database, claim.job, claim.id, claim.period))
    statement = (
        update(runs)
        .where(*conditions)
        .values(
            status=RunStatus.RUNNING.value,
            started_at=database.now(),
            started_attempts=runs.c.started_attempts + 1,
            lease_expires_at=database.lease_until(claim.lease_seconds),
        )
    )
    if connection.execute(statement).rowcount == 1:
        return Start.STARTED
    waiting = and_(mine, runs.c.status == RunStatus.CLAIMED.value)
    if request.after_earlier and connection.execute(select(runs.c.id).where(waiting)).first():
        return Start.WAIT
    return Start.LOST


def _finish_one(database: Database, connection: Connection, outcome: Finish) -> bool:
    failure = outcome.failure
    lease = database.lease_until(outcome.claim.lease_seconds) if outcome.lingering else None
    conditions = [_fenced(outcome.claim)]
    if outcome.waiting_only:
        conditions.append(runs.c.status == RunStatus.CLAIMED.value)
    statement = (
        update(runs)
        .where(*conditions)
        .values(
            status=outcome.status.value,
            reason=outcome.reason.value if outcome.reason else None,
            finished_at=database.now(),
            duration_ms=outcome.duration_ms,
            lease_expires_at=lease,
            retry_at=None if outcome.retry_in is None else database.now_plus(outcome.retry_in),
            error_type=failure.type if failure else None,
            error_message=failure.message if failure else None,
            error_traceback=failure.traceback if failure else None,
        )
    )
    if connection.execute(statement).rowcount == 1:
        return True
    return _already_written(connection, [outcome]) == [True]


def _already_written(connection: Connection, outcomes: Sequence[Finish]) -> list[bool]:
    """For refused outcomes: which of them the row already shows, under the same fence
    (an earlier try of this very write, whose reply was lost)."""
    ids = [outcome.claim.id for outcome in outcomes]
    rows = {
        row.id: row
        for row in connection.execute(
            select(runs.c.id, runs.c.attempt, runs.c.holder, runs.c.status).where(
                runs.c.id.in_(ids)
            )
        )
    }
    answers = []
    for outcome in outcomes:
        row = rows.get(outcome.claim.id)
        answers.append(
            row is not None
            and (row.attempt, row.holder) == (outcome.claim.attempt, outcome.claim.holder)
            and row.status == outcome.status.value
        )
    return answers


# The batches below find their rows by `id`. Their status test is written `(…) IS TRUE`,
# which means the same but no index can serve: right after a burst the statistics are
# stale (a few claimed rows expected, 10,000 there) and the planner took the status
# index, reading every claimed row for each batch of 16 (1.3 ms instead of 0.4 ms).
# A row already running under the same fence is this start, tried again: it keeps its
# started_at and start count and only has its lease renewed.
_START_POSTGRES = text(
    f"""
    UPDATE {runs.name} AS run SET status = 'running',
        started_at = CASE WHEN run.status = 'claimed' THEN statement_timestamp()
                          ELSE run.started_at END,
        started_attempts = run.started_attempts
                           + CASE WHEN run.status = 'claimed' THEN 1 ELSE 0 END,
        lease_expires_at = clock_timestamp() + make_interval(secs => run.lease_seconds)
    FROM unnest(CAST(:ids AS TEXT[]), CAST(:attempts AS INT[]), CAST(:holders AS TEXT[]),
                CAST(:ordered AS BOOLEAN[])) AS wanted(id, attempt, holder, ordered)
    WHERE run.id = ANY(CAST(:ids AS TEXT[])) AND run.id = wanted.id
      AND run.attempt = wanted.attempt AND run.holder = wanted.holder
      AND (run.status IN ({_ACTIVE_SQL})) IS TRUE
      AND run.lease_expires_at > statement_timestamp()
      AND (run.status = 'running' OR NOT (wanted.ordered AND EXISTS (
          SELECT FROM {runs.name} AS other
          WHERE other.job = run.job AND other.id <> run.id
            AND other.lease_expires_at > statement_timestamp()
            AND (other.status IN ('running', 'timed_out')
                 OR (other.status = 'claimed' AND other.period < run.period)))))
    RETURNING run.id, run.attempt, run.holder
    """  # noqa: S608 - table names and statuses are our constants; values are parameters
)

_STILL_WAITING_POSTGRES = text(
    f"""
    SELECT run.id, run.attempt, run.holder FROM {runs.name} AS run
    JOIN unnest(CAST(:ids AS TEXT[]), CAST(:attempts AS INT[]), CAST(:holders AS TEXT[]))
         AS wanted(id, attempt, holder)
      ON run.id = wanted.id AND run.attempt = wanted.attempt AND run.holder = wanted.holder
    WHERE run.id = ANY(CAST(:ids AS TEXT[])) AND (run.status = 'claimed') IS TRUE
    """  # noqa: S608 - table names and statuses are our constants; values are parameters
)


def _fence(claim: Claim) -> tuple[str, int, str]:
    return (claim.id, claim.attempt, claim.holder)


def _fence_arrays(claims: Sequence[Claim]) -> dict[str, list[Any]]:
    return {
        "ids": [claim.id for claim in claims],
        "attempts": [claim.attempt for claim in claims],
        "holders": [claim.holder for claim in claims],
    }


def _start_postgres(connection: Connection, requests: Sequence[StartRequest]) -> list[Start]:
    if not requests:
        return []
    claims = [request.claim for request in requests]
    parameters = {**_fence_arrays(claims), "ordered": [r.after_earlier for r in requests]}
    started = {tuple(row) for row in connection.execute(_START_POSTGRES, parameters)}
    waiting = [r.claim for r in requests if r.after_earlier and _fence(r.claim) not in started]
    held = set()
    if waiting:
        held = {
            tuple(row)
            for row in connection.execute(_STILL_WAITING_POSTGRES, _fence_arrays(waiting))
        }
    return [
        Start.STARTED
        if _fence(request.claim) in started
        else Start.WAIT
        if _fence(request.claim) in held
        else Start.LOST
        for request in requests
    ]


_FINISH_POSTGRES = text(
    f"""
    UPDATE {runs.name} AS run
    SET status = done.status, reason = done.reason, finished_at = statement_timestamp(),
        duration_ms = done.duration_ms,
        lease_expires_at = CASE WHEN done.lingering
            THEN clock_timestamp() + make_interval(secs => run.lease_seconds) END,
        retry_at = statement_timestamp() + make_interval(secs => done.retry_in),
        error_type = done.error_type, error_message = done.error_message,
        error_traceback = done.error_traceback
    FROM unnest(CAST(:ids AS TEXT[]), CAST(:attempts AS INT[]), CAST(:holders AS TEXT[]),
                CAST(:statuses AS TEXT[]), CAST(:reasons AS TEXT[]),
                CAST(:durations AS INT[]), CAST(:retry_in AS FLOAT8[]),
                CAST(:lingering AS BOOLEAN[]), CAST(:waiting_only AS BOOLEAN[]),
                CAST(:error_types AS TEXT[]), CAST(:error_messages AS TEXT[]),
                CAST(:error_tracebacks AS TEXT[]))
         AS done(id, attempt, holder, status, reason, duration_ms, retry_in, lingering,
                 waiting_only, error_type, error_message, error_traceback)
    WHERE run.id = ANY(CAST(:ids AS TEXT[])) AND run.id = done.id
      AND run.attempt = done.attempt AND run.holder = done.holder
      AND (run.status IN ({_ACTIVE_SQL})) IS TRUE
      AND (NOT done.waiting_only OR run.status = 'claimed')
    RETURNING run.id, run.attempt, run.holder
    """  # noqa: S608 - table names and statuses are our constants; values are parameters
)


def _finish_postgres(connection: Connection, outcomes: Sequence[Finish]) -> list[bool]:
    if not outcomes:
        return []
    failures = [outcome.failure for outcome in outcomes]
    parameters = {
        **_fence_arrays([outcome.claim for outcome in outcomes]),
        "statuses": [outcome.status.value for outcome in outcomes],
        "reasons": [outcome.reason.value if outcome.reason else None for outcome in outcomes],
        "durations": [outcome.duration_ms for outcome in outcomes],
        "retry_in": [outcome.retry_in for outcome in outcomes],
        "lingering": [outcome.lingering for outcome in outcomes],
        "waiting_only": [outcome.waiting_only for outcome in outcomes],
        "error_types": [failure.type if failure else None for failure in failures],
        "error_messages": [failure.message if failure else None for failure in failures],
        "error_tracebacks": [failure.traceback if failure else None for failure in failures],
    }
    applied = {tuple(row) for row in connection.execute(_FINISH_POSTGRES, parameters)}
    written = [_fence(outcome.claim) in applied for outcome in outcomes]
    refused = [outcome for outcome, ok in zip(outcomes, written, strict=True) if not ok]
    if refused:
        again = iter(_already_written(connection, refused))
        written = [ok or next(again) for ok in written]
    return written


def release(database: Database, claim: Claim, *, after: float = 0.0) -> bool:
    """A lingering attempt's function returned: drop the lease it kept, so its retry
    (if any) may go ahead. Fenced like any write of the attempt. `after` keeps the
    lease that many seconds more (a node about to exit with the function still in it)."""
    statement = (
        update(runs)
        .where(
            runs.c.id == claim.id,
            runs.c.attempt == claim.attempt,
            runs.c.holder == claim.holder,
            runs.c.status == RunStatus.TIMED_OUT.value,
        )
        .values(lease_expires_at=database.lease_until(after) if after else None)
    )
    with database.transaction() as connection:
        return connection.execute(statement).rowcount == 1


@dataclass(frozen=True)
class Held:
    """A row this node's name is on with a live lease, as a renewal found it."""

    id: str
    job: str
    period: datetime
    attempt: int
    status: RunStatus
    lease_seconds: float
    origin: Origin
    started_attempts: int

    @property
    def key(self) -> RunKey:
        return (self.id, self.attempt)

    def as_claim(self, holder: str, lease_from: float) -> Claim:
        """The row as a claim to run (it is `claimed`: this attempt has not started)."""
        return Claim(
            self.id,
            self.job,
            self.period,
            self.attempt,
            holder,
            self.lease_seconds,
            self.origin,
            lease_from,
            self.started_attempts,
        )


_HELD_COLUMNS = (
    runs.c.id,
    runs.c.job,
    runs.c.period,
    runs.c.attempt,
    runs.c.status,
    runs.c.lease_seconds,
    runs.c.origin,
    runs.c.started_attempts,
)


def renew_leases(database: Database, holder: str) -> list[Held]:
    """Push forward every live lease held in this holder's name, and say which.

    Found by the name, not by a list of ids: a run this node claimed or started without
    hearing back (a lost reply) is found too, and the caller can adopt or release it. A
    lease that has already run out by the database clock is not renewed: the run is
    anyone's then, and its old holder must learn that it lost it.
    """
    now = database.now()
    mine = and_(
        runs.c.holder == holder,
        runs.c.lease_expires_at >= now,
        runs.c.status.in_([*ACTIVE, RunStatus.TIMED_OUT.value]),
    )
    with database.transaction() as connection:
        if database.is_postgres:
            statement = (
                update(runs)
                .where(mine)
                .values(lease_expires_at=database.lease_until(runs.c.lease_seconds))
                .returning(*_HELD_COLUMNS)
            )
            return [_held(row) for row in connection.execute(statement)]
        found = [_held(row) for row in connection.execute(select(*_HELD_COLUMNS).where(mine))]
        for seconds in {row.lease_seconds for row in found}:
            ids = [row.id for row in found if row.lease_seconds == seconds]
            connection.execute(
                update(runs)
                .where(runs.c.id.in_(ids), mine)
                .values(lease_expires_at=database.lease_until(seconds))
            )
    return found


def _held(row: Any) -> Held:
    return Held(
        row.id,
        row.job,
        row.period,
        row.attempt,
        RunStatus(row.status),
        row.lease_seconds,
        Origin(row.origin),
        row.started_attempts,
    )


# -- takeover: find stale runs, retake them or give them up -----------------------------


@dataclass(frozen=True)
class Stale:
    """A run another node may take over: its lease expired, or it waits for a retry."""

    id: str
    job: str
    period: datetime
    attempt: int
    holder: str | None
    status: RunStatus
    lease_seconds: float
    origin: Origin
    expired: bool
    # Attempts that called the function: what counts against the job's retries.
    started_attempts: int = 0


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
    abandoned), then the run row is compare-and-set on the state we read, and on it
    still being stale by the database clock. The job's lock orders it with the starts
    of its other periods. `by_hand` (rerun, backfill): a run that ended is taken as it
    was read, due or not, paused or not; it still must not have changed since.
    """
    new_origin = origin or stale.origin
    sent = time.monotonic()
    with database.guarded() as guarded:
        connection = guarded.connection
        lock_jobs(database, connection, [stale.job])
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
        reason: ColumnElement[Any] = literal(Reason.LEASE_EXPIRED.value)
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
    if database.is_postgres:
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


def holder_of(
    database: Database, job: str, period: datetime
) -> tuple[str | None, RunStatus] | None:
    """Who holds a period and in which state, for a loser's log line."""
    with database.transaction() as connection:
        row = connection.execute(
            select(runs.c.holder, runs.c.status).where(runs.c.job == job, runs.c.period == period)
        ).first()
    return None if row is None else (row.holder, RunStatus(row.status))


def get(database: Database, job: str, period: datetime) -> dict[str, object] | None:
    """One run as a plain mapping, for the CLI and tests."""
    with database.transaction() as connection:
        row = connection.execute(
            select(runs).where(runs.c.job == job, runs.c.period == period)
        ).first()
    return dict(row._mapping) if row else None


def seconds_until_recovery(database: Database, jobs: Sequence[str] | None) -> float | None:
    """How long until the next lease of these jobs expires or retry falls due, by the
    database clock; None if nothing is pending.

    `jobs=None` (the recovery loop) asks about every job without sending names, and only
    about deadlines still ahead: one already past belongs to a job no node here runs, or
    is taken by the pass that follows anyway.
    """
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
    elif not jobs:
        return None
    else:
        statement = select(
            func.min(case((leased, runs.c.lease_expires_at), else_=null())),
            func.min(runs.c.retry_at),
            database.now(),
        ).where(runs.c.job.in_(jobs), runs.c.status.in_([*ACTIVE, *RETRYABLE]))
    with database.transaction() as connection:
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
