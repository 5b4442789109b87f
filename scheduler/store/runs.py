"""Claiming periods and recording what became of them: the runs table's statements.

Every write after the claim is fenced on (id, attempt, holder): a node that lost
its lease learns so from a zero row count and cannot overwrite the new holder.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
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
# (run id, attempt): the fencing pair that names one attempt of a run.
RunKey = tuple[str, int]
_other = runs.alias("other")
# The active statuses as SQL literals, for statements written as text.
_ACTIVE_SQL = ", ".join(f"'{status}'" for status in ACTIVE)


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
    """A period this node holds: the fencing triple plus what a dispatcher needs."""

    id: str
    job: str
    period: datetime
    attempt: int
    holder: str
    lease_seconds: float
    origin: Origin

    @property
    def key(self) -> RunKey:
        """One attempt of one run: a node may hold a later attempt of a run it lost."""
        return (self.id, self.attempt)


@dataclass(frozen=True)
class ClaimResult:
    won: list[Claim]
    skipped: list[Claim]
    reasons: dict[str, Reason] = field(default_factory=dict)


@dataclass(frozen=True)
class Failure:
    """What went wrong in a run, trimmed for storage."""

    type: str
    message: str
    traceback: str


def claim(
    database: Database,
    due: Sequence[Due],
    holder: str,
    committed: Callable[[ClaimResult], None] | None = None,
) -> ClaimResult:
    """Claim many periods at once; return the ones this node won, and those it skipped.

    One `INSERT … ON CONFLICT (job, period) DO NOTHING RETURNING` per round of a chunk
    (on PostgreSQL the periods travel as arrays; SQLAlchemy pages SQLite's as multi-row
    VALUES): a row comes back only for the periods nobody held, so losing is silent. A
    period whose job is still running elsewhere is inserted as `skipped` (reason
    overlap) by the same statement; on PostgreSQL that check is serialised per job by
    transaction-scoped advisory locks, so no lock outlives the statement and nothing
    depends on a session.
    """
    result = ClaimResult([], [])
    chunks = list(_chunks_by_job(due))
    # Every node cuts the same chunks but takes them in an order of its own, so that
    # replicas claiming one big batch win different chunks side by side instead of
    # queueing behind whichever node locked the first chunk (which then won them all).
    # Each transaction locks one chunk's jobs in key order: no deadlock. `committed`
    # hears of each chunk's claims once they are committed, so that a caller can run
    # them even when a later chunk fails.
    for chunk in random.sample(chunks, len(chunks)):
        part = ClaimResult([], [])
        with database.transaction() as connection:
            if database.is_postgres and any(item.overlap_limit is not None for item in chunk):
                _lock_jobs(connection, {item.job for item in chunk})
            for batch in _rounds(chunk):
                if database.is_postgres:
                    _insert_claims_postgres(connection, batch, holder, part)
                    continue
                for group in _statement_groups(database, batch):
                    _insert_claims(database, connection, group, holder, part)
        result.won.extend(part.won)
        result.skipped.extend(part.skipped)
        result.reasons.update(part.reasons)
        if committed is not None:
            committed(part)
    return result


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


def _rounds(due: Sequence[Due]) -> Iterator[list[Due]]:
    """Round k holds the k-th oldest period of each job, so a later round's overlap check
    sees the rows of earlier rounds: one statement cannot see its own inserts.

    Normally every job has one period due and there is a single round; several come
    only from a backlog (the database was unreachable for a while).
    """
    by_job: dict[str, list[Due]] = {}
    for item in due:
        by_job.setdefault(item.job, []).append(item)
    depth = max(len(items) for items in by_job.values())
    for index in range(depth):
        yield [items[index] for items in by_job.values() if index < len(items)]


def _lock_jobs(connection: Connection, jobs: set[str]) -> None:
    """Take the per-job overlap locks in one statement, in key order: no deadlock."""
    keys = sorted(job_lock_key(job) for job in jobs)
    connection.execute(
        text(
            "SELECT pg_advisory_xact_lock(k) FROM unnest(CAST(:keys AS BIGINT[])) AS k ORDER BY k"
        ),
        {"keys": keys},
    )


def job_lock_key(job: str) -> int:
    """A stable signed 64-bit key per job, the same on every node and Python version."""
    digest = hashlib.blake2b(f"scheduler:{job}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _statement_groups(database: Database, due: Sequence[Due]) -> Iterator[list[Due]]:
    """Rows that share one statement shape: with or without the overlap check, and on
    SQLite (whose lease is a value computed here) the same lease length."""
    groups: dict[tuple[bool, float], list[Due]] = {}
    for item in due:
        lease_key = 0.0 if database.is_postgres else item.lease_seconds
        groups.setdefault((item.overlap_limit is None, lease_key), []).append(item)
    yield from groups.values()


def _insert_claims(
    database: Database, connection: Connection, due: list[Due], holder: str, result: ClaimResult
) -> None:
    now = database.now()
    expiry = database.now_plus(
        bindparam("lease_seconds") if database.is_postgres else due[0].lease_seconds
    )
    if due[0].overlap_limit is None:
        overlapping: ColumnElement[bool] = bindparam("never", False)
    else:
        others_active = (
            select(func.count())
            .select_from(_other)
            .where(
                _other.c.job == bindparam("job"),
                _other.c.period != bindparam("period"),
                # Inlined constants: executemany forbids expanding IN parameters.
                _other.c.status.in_([literal_column(f"'{status}'") for status in ACTIVE]),
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
            holder=holder,
            lease_seconds=bindparam("lease_seconds"),
            lease_expires_at=case((skipped, null()), else_=expiry),
            claimed_at=now,
            finished_at=case((skipped, now), else_=null()),
        )
        .on_conflict_do_nothing(index_elements=["job", "period"])
        .returning(runs.c.id, runs.c.status, runs.c.reason)
    )
    candidates = {uuid.uuid4().hex: item for item in due}
    parameters = [
        {
            "id": run_id,
            "job": item.job,
            "period": item.period,
            "origin": item.origin.value,
            "lease_seconds": item.lease_seconds,
            "overlap_limit": item.overlap_limit or 0,
            "never": False,
        }
        for run_id, item in candidates.items()
    ]
    _collect(candidates, connection.execute(statement, parameters), holder, result)


def _collect(
    candidates: dict[str, Due], rows: Iterable[Any], holder: str, result: ClaimResult
) -> None:
    """Sort the rows an insert returned (id, status, reason) into won and skipped."""
    for run_id, status, reason in rows:
        item = candidates[run_id]
        claimed = Claim(run_id, item.job, item.period, 1, holder, item.lease_seconds, item.origin)
        if status == RunStatus.SKIPPED:
            result.skipped.append(claimed)
            result.reasons[run_id] = Reason(reason)
        else:
            result.won.append(claimed)


# PostgreSQL: the periods travel as one array per column and the statement text is the
# same for any batch size, so the server parses and plans it once per round instead of
# once per row (a multi-row VALUES with the overlap subqueries repeated in each row took
# about 2 s to plan for 1,000 periods). Paused beats overlap; a NULL limit allows any.
_CLAIM_POSTGRES = text(
    f"""
    INSERT INTO {runs.name} (id, job, period, status, reason, origin, attempt, holder,
                             lease_seconds, lease_expires_at, claimed_at, finished_at)
    SELECT due.id, due.job, due.period,
           CASE WHEN verdict.reason IS NULL THEN 'claimed' ELSE 'skipped' END,
           verdict.reason, due.origin, 1, :holder, due.lease_seconds,
           CASE WHEN verdict.reason IS NULL
                THEN now() + make_interval(secs => due.lease_seconds) END,
           now(),
           CASE WHEN verdict.reason IS NOT NULL THEN now() END
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
                        AND other.status IN ({_ACTIVE_SQL})
                     ) >= due.overlap_limit THEN 'overlap'
        END AS reason
    ) AS verdict
    ON CONFLICT (job, period) DO NOTHING
    RETURNING id, status, reason
    """  # noqa: S608 - table names and statuses are our constants; values are parameters
)


def _insert_claims_postgres(
    connection: Connection, due: list[Due], holder: str, result: ClaimResult
) -> None:
    candidates = {uuid.uuid4().hex: item for item in due}
    rows = connection.execute(
        _CLAIM_POSTGRES,
        {
            "holder": holder,
            "ids": list(candidates),
            "jobs": [item.job for item in due],
            "periods": [item.period for item in due],
            "origins": [item.origin.value for item in due],
            "leases": [item.lease_seconds for item in due],
            "limits": [item.overlap_limit for item in due],
        },
    )
    _collect(candidates, rows, holder, result)


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
    many seconds; any node's recovery pass may take it then."""

    claim: Claim
    status: RunStatus
    duration_ms: int | None
    failure: Failure | None = None
    reason: Reason | None = None
    retry_in: float | None = None


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
    waited for ends. On PostgreSQL each kind is one statement, whatever the batch size
    (arrays again), sent in autocommit: one round trip each. SQLite, local and
    single-writer, takes a statement a row inside one transaction.
    """
    if database.is_postgres:
        with database.autocommit() as connection:
            return _finish_postgres(connection, outcomes), _start_postgres(connection, starts)
    with database.transaction() as connection:
        applied = [_finish_one(database, connection, outcome) for outcome in outcomes]
        started = [_start_one(database, connection, request) for request in starts]
    return applied, started


def _earlier_active(job: Any, run_id: Any, period: Any) -> ColumnElement[bool]:
    return exists().where(
        _other.c.job == job,
        _other.c.id != run_id,
        or_(
            _other.c.status == RunStatus.RUNNING.value,
            and_(_other.c.status == RunStatus.CLAIMED.value, _other.c.period < period),
        ),
    )


def _start_one(database: Database, connection: Connection, request: StartRequest) -> Start:
    claim = request.claim
    conditions = [_fenced(claim), runs.c.status == RunStatus.CLAIMED.value]
    if request.after_earlier:
        conditions.append(~_earlier_active(claim.job, claim.id, claim.period))
    statement = (
        update(runs)
        .where(*conditions)
        .values(status=RunStatus.RUNNING.value, started_at=database.now())
    )
    if connection.execute(statement).rowcount == 1:
        return Start.STARTED
    if (
        request.after_earlier
        and connection.execute(select(runs.c.id).where(_fenced(claim))).first()
    ):
        return Start.WAIT
    return Start.LOST


def _finish_one(database: Database, connection: Connection, outcome: Finish) -> bool:
    failure = outcome.failure
    statement = (
        update(runs)
        .where(_fenced(outcome.claim))
        .values(
            status=outcome.status.value,
            reason=outcome.reason.value if outcome.reason else None,
            finished_at=database.now(),
            duration_ms=outcome.duration_ms,
            lease_expires_at=None,
            retry_at=None if outcome.retry_in is None else database.now_plus(outcome.retry_in),
            error_type=failure.type if failure else None,
            error_message=failure.message if failure else None,
            error_traceback=failure.traceback if failure else None,
        )
    )
    return bool(connection.execute(statement).rowcount == 1)


# The batches below find their rows by `id`. Their status test is written `(…) IS TRUE`,
# which means the same but no index can serve: right after a burst the statistics are
# stale (a few claimed rows expected, 10,000 there) and the planner took the status
# index, reading every claimed row for each batch of 16 (1.3 ms instead of 0.4 ms).
_START_POSTGRES = text(
    f"""
    UPDATE {runs.name} AS run SET status = 'running', started_at = now()
    FROM unnest(CAST(:ids AS TEXT[]), CAST(:attempts AS INT[]), CAST(:holders AS TEXT[]),
                CAST(:ordered AS BOOLEAN[])) AS wanted(id, attempt, holder, ordered)
    WHERE run.id = ANY(CAST(:ids AS TEXT[])) AND run.id = wanted.id
      AND run.attempt = wanted.attempt
      AND run.holder = wanted.holder AND (run.status = 'claimed') IS TRUE
      AND NOT (wanted.ordered AND EXISTS (
          SELECT FROM {runs.name} AS other
          WHERE other.job = run.job AND other.id <> run.id
            AND (other.status = 'running'
                 OR (other.status = 'claimed' AND other.period < run.period))))
    RETURNING run.id, run.attempt, run.holder
    """  # noqa: S608 - table names and statuses are our constants; values are parameters
)

_STILL_HELD_POSTGRES = text(
    f"""
    SELECT run.id, run.attempt, run.holder FROM {runs.name} AS run
    JOIN unnest(CAST(:ids AS TEXT[]), CAST(:attempts AS INT[]), CAST(:holders AS TEXT[]))
         AS wanted(id, attempt, holder)
      ON run.id = wanted.id AND run.attempt = wanted.attempt AND run.holder = wanted.holder
    WHERE run.id = ANY(CAST(:ids AS TEXT[])) AND (run.status IN ({_ACTIVE_SQL})) IS TRUE
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
            tuple(row) for row in connection.execute(_STILL_HELD_POSTGRES, _fence_arrays(waiting))
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
    SET status = done.status, reason = done.reason, finished_at = now(),
        duration_ms = done.duration_ms, lease_expires_at = NULL,
        retry_at = now() + make_interval(secs => done.retry_in),
        error_type = done.error_type, error_message = done.error_message,
        error_traceback = done.error_traceback
    FROM unnest(CAST(:ids AS TEXT[]), CAST(:attempts AS INT[]), CAST(:holders AS TEXT[]),
                CAST(:statuses AS TEXT[]), CAST(:reasons AS TEXT[]),
                CAST(:durations AS INT[]), CAST(:retry_in AS FLOAT8[]),
                CAST(:error_types AS TEXT[]), CAST(:error_messages AS TEXT[]),
                CAST(:error_tracebacks AS TEXT[]))
         AS done(id, attempt, holder, status, reason, duration_ms, retry_in,
                 error_type, error_message, error_traceback)
    WHERE run.id = ANY(CAST(:ids AS TEXT[])) AND run.id = done.id
      AND run.attempt = done.attempt AND run.holder = done.holder
      AND (run.status IN ({_ACTIVE_SQL})) IS TRUE
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
        "error_types": [failure.type if failure else None for failure in failures],
        "error_messages": [failure.message if failure else None for failure in failures],
        "error_tracebacks": [failure.traceback if failure else None for failure in failures],
    }
    applied = {tuple(row) for row in connection.execute(_FINISH_POSTGRES, parameters)}
    return [_fence(outcome.claim) in applied for outcome in outcomes]


def renew_leases(database: Database, claims: Sequence[Claim]) -> set[RunKey]:
    """Push the lease of each held run forward; return the attempts still ours."""
    if not claims:
        return set()
    renewed: set[RunKey] = set()
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
                    runs.c.status.in_(ACTIVE),
                )
                .values(lease_expires_at=database.now_plus(seconds))
                .returning(runs.c.id, runs.c.attempt)
            )
            held_keys = {held.key for held in group}
            renewed |= {
                (run_id, attempt)
                for run_id, attempt in connection.execute(statement)
                if (run_id, attempt) in held_keys
            }
    return renewed


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


STALE_COLUMNS = (
    runs.c.id,
    runs.c.job,
    runs.c.period,
    runs.c.attempt,
    runs.c.holder,
    runs.c.status,
    runs.c.lease_seconds,
    runs.c.origin,
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
    )


def find_stale(database: Database, jobs: Collection[str], limit: int) -> list[Stale]:
    """Runs of these jobs whose lease expired or whose retry is due, oldest first.

    The job names are not sent: a node may run 10,000 jobs and looks every second, and
    stale runs are few. Runs of jobs this node does not know are paged past here.
    """
    known = set(jobs)
    now = database.now()
    expired = and_(runs.c.status.in_(ACTIVE), runs.c.lease_expires_at < now)
    found: list[Stale] = []
    after: tuple[datetime, str] | None = None
    with database.transaction() as connection:
        while len(found) < limit:
            statement = select(*STALE_COLUMNS, expired.label("expired")).where(
                expired | (runs.c.retry_at <= now)
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
    database: Database, stale: Stale, holder: str, origin: Origin | None = None
) -> Claim | None:
    """Take a stale run over as the next attempt; None if somebody else was faster.

    The superseded attempt is copied to `scheduler_attempts` first (an expired one as
    abandoned), then the run row is compare-and-set on the state we read.
    """
    new_origin = origin or stale.origin
    with database.transaction() as connection:
        if not _supersede(database, connection, stale):
            return None
        taken = connection.execute(
            update(runs)
            .where(*_observed(stale))
            .values(
                attempt=stale.attempt + 1,
                holder=holder,
                status=RunStatus.CLAIMED.value,
                reason=None,
                origin=new_origin.value,
                lease_expires_at=database.now_plus(stale.lease_seconds),
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
    )


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
            connection.execute(update(runs).where(*_observed(stale)).values(**values)).rowcount == 1
        )


def _observed(stale: Stale) -> list[ColumnElement[bool]]:
    """The run is still exactly as we read it: same attempt, holder and status."""
    holder = runs.c.holder.is_(None) if stale.holder is None else runs.c.holder == stale.holder
    return [
        runs.c.id == stale.id,
        runs.c.attempt == stale.attempt,
        runs.c.status == stale.status.value,
        holder,
    ]


def _supersede(database: Database, connection: Connection, stale: Stale) -> bool:
    """Copy the attempt being replaced into the attempts table (once, whoever wins)."""
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
    ).where(*_observed(stale))
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
    if jobs is None:
        now = database.now()
        lease_ahead = select(func.min(runs.c.lease_expires_at)).where(
            runs.c.status.in_(ACTIVE), runs.c.lease_expires_at > now
        )
        retry_ahead = select(func.min(runs.c.retry_at)).where(runs.c.retry_at > now)
        statement = select(
            lease_ahead.scalar_subquery(), retry_ahead.scalar_subquery(), database.now()
        )
    elif not jobs:
        return None
    else:
        statement = select(
            func.min(case((runs.c.status.in_(ACTIVE), runs.c.lease_expires_at), else_=null())),
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
