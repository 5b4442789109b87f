"""Claiming periods: one INSERT … ON CONFLICT DO NOTHING per chunk of due periods.

The primary key (job, period) decides who owns a period: a row comes back only for the
periods nobody held, so losing is silent. The same statement records a period as
`skipped` when its job is paused or occupied by an earlier period (see `store.fence`);
each period is judged against the runs outside its own batch, so a backlog claimed
together is not skipped because of its own neighbours. Periods ahead of the database
clock are not claimed.

Two forms of the insert: with `Database.arrays` the periods travel as one array a
column and the statement is parsed and planned once whatever the batch size; otherwise
an executemany of one row a statement in one transaction, each row's overlap judged by
its own subquery.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from scheduler.model import FUTURE_TOLERANCE, Claim, ClaimResult, Due
from scheduler.states import Origin, Reason, RunStatus
from scheduler.store import events as alert_events
from scheduler.store.connection import pairs_in
from scheduler.store.database import Connection, Database
from scheduler.store.fence import RUNS, occupant_sql, running_body_sql
from scheduler.store.nodes import DOUBTFUL_HOLDERS
from scheduler.store.wakeups import notify_claimed

# Advisory locks count against PostgreSQL's shared lock table; keep each transaction modest.
JOBS_PER_TRANSACTION = 500


def claim(
    database: Database,
    due: Sequence[Due],
    holder: str,
    committed: Callable[[ClaimResult], None] | None = None,
    *,
    adopt: bool = False,
    returned: Sequence[str] = (),
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

    A period with `start` (its node set a worker aside for it) is marked running by the
    claim itself when it is its job's turn, and its id returned in `started`: one
    transaction and one round trip less between the period and the call of its
    function (PostgreSQL; SQLite claims it, and the node starts it after).

    `adopt`, for a claim tried again after a fault: periods this holder already claimed
    (the commit landed but its reply was lost) are returned as won, not as lost.
    `returned`: ids of this holder's runs whose function has returned and whose outcome
    is still being written: no period is skipped behind them.
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
        ordered = any(item.overlap_limit is not None for item in chunk)
        with database.guarded(jobs={item.job for item in chunk} if ordered else ()) as guarded:
            connection = guarded.connection
            horizon = guarded.began + FUTURE_TOLERANCE
            ready = [item for item in chunk if item.period <= horizon]
            part.early.extend(item for item in chunk if item.period > horizon)
            # Adopted rows belong to this batch: the others are not judged against them.
            if adopt:
                _adopt(database, connection, ready, holder, sent=sent, result=part)
            claim_in(database, connection, ready, holder, sent=sent, result=part, returned=returned)
        result.won.extend(part.won)
        result.skipped.extend(part.skipped)
        result.reasons.update(part.reasons)
        result.early.extend(part.early)
        result.started.update(part.started)
        if committed is not None:
            committed(part)
    return result


def claim_in(
    database: Database,
    connection: Connection,
    due: Sequence[Due],
    holder: str,
    *,
    sent: float,
    result: ClaimResult,
    returned: Sequence[str] = (),
) -> None:
    """Inside an open transaction that holds the jobs' locks: insert the claims of
    `due` (all within the database clock) into `result`, with their alert events and
    the notification of what was claimed. Periods already in `result.won` (adopted)
    belong to this batch."""
    mine = {(claim.job, claim.period) for claim in result.won}
    fresh = [item for item in due if (item.job, item.period) not in mine]
    ours = [claim.id for claim in result.won]
    if database.arrays:
        _insert_claims_postgres(
            connection, fresh, holder, sent=sent, result=result, ours=ours, returned=returned
        )
    else:
        _insert_claims(
            database,
            connection,
            fresh,
            holder,
            sent=sent,
            result=result,
            ours=ours,
            returned=returned,
        )
    alert_events.skipped(database, connection, result.skipped, result.reasons)
    # Rows now exist for these periods: the peers need not read that they do.
    notify_claimed(
        database,
        connection,
        [(claim.job, claim.period) for claim in [*result.won, *result.skipped]],
    )


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


# SQLite: one row a statement (in the claim's transaction), each judged by its own
# subqueries. The batch's own rows (and those adopted into it) are left out of the
# overlap count, as PostgreSQL's single statement cannot see them: their ids travel as
# one JSON list, and so do the ids of this node's runs whose function has returned
# (`:returned`). A NULL limit allows any overlap. Paused beats overlap. SQLite has no
# liveness lock: no holder is in doubt but by its lease.
_PAUSED_SQLITE = "EXISTS (SELECT 1 FROM scheduler_jobs AS job WHERE job.name = :job AND job.paused)"
_EARLIER_SQLITE = f"""FROM {RUNS} AS other
    WHERE other.job = :job AND other.period < :period
      AND other.id NOT IN (SELECT value FROM json_each(:batch))"""
_RUNNING_SQLITE = running_body_sql(
    ":now", ":period", "other.id IN (SELECT value FROM json_each(:returned))", "0"
)
_OVERLAPPING_SQLITE = f"""(:overlap_limit IS NOT NULL
    AND EXISTS (SELECT 1 {_EARLIER_SQLITE} AND {_RUNNING_SQLITE})
    AND (SELECT count(*) {_EARLIER_SQLITE}
         AND {occupant_sql(":now", _RUNNING_SQLITE)}) >= :overlap_limit)"""
_SKIPPED_SQLITE = f"(:excluded OR {_PAUSED_SQLITE} OR {_OVERLAPPING_SQLITE})"
_CLAIM_SQLITE = f"""
    INSERT INTO {RUNS} (id, job, period, status, reason, origin, attempt, started_attempts,
                        holder, lease_seconds, lease_expires_at, claimed_at, finished_at)
    VALUES (:id, :job, :period,
            CASE WHEN {_SKIPPED_SQLITE} THEN 'skipped' ELSE 'claimed' END,
            CASE WHEN :excluded THEN 'calendar'
                 WHEN {_PAUSED_SQLITE} THEN 'paused'
                 WHEN {_OVERLAPPING_SQLITE} THEN 'overlap' END,
            :origin, 1, 0, :holder, :lease_seconds,
            CASE WHEN {_SKIPPED_SQLITE} THEN NULL ELSE :expiry END,
            :now,
            CASE WHEN {_SKIPPED_SQLITE} THEN :now END)
    ON CONFLICT (job, period) DO NOTHING
    RETURNING id, status, reason
"""


def _insert_claims(
    database: Database,
    connection: Connection,
    due: list[Due],
    holder: str,
    *,
    sent: float,
    result: ClaimResult,
    ours: Sequence[str] = (),
    returned: Sequence[str] = (),
) -> None:
    """SQLite: an INSERT a row, each judged by its own subqueries (see _CLAIM_SQLITE)."""
    if not due:
        return
    candidates = {uuid.uuid4().hex: item for item in due}
    batch_ids = json.dumps([*candidates, *ours])
    returned_ids = json.dumps(list(returned))
    rows = []
    for run_id, item in candidates.items():
        parameters = {
            "id": run_id,
            "job": item.job,
            "period": item.period,
            "origin": item.origin.value,
            "holder": holder,
            "lease_seconds": item.lease_seconds,
            "overlap_limit": item.overlap_limit,
            "excluded": item.excluded,
            "batch": batch_ids,
            "returned": returned_ids,
            "expiry": database.host_after(item.lease_seconds),
        }
        rows += connection.execute(_CLAIM_SQLITE, parameters).rows
    _collect(candidates, rows, holder, sent, result)


def _collect(
    candidates: dict[str, Due], rows: Iterable[Any], holder: str, sent: float, result: ClaimResult
) -> None:
    """Sort the rows an insert returned (id, status, reason) into won, started and
    skipped."""
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
            if status == RunStatus.RUNNING:
                result.started.add(run_id)


# PostgreSQL: the periods travel as one array per column and the statement text is the
# same for any batch size, so the server parses and plans it once instead of once per
# row (a multi-row VALUES with the overlap subqueries repeated in each row took longer
# to plan than to run for a large batch). Paused beats overlap; a NULL limit allows any. The
# overlap count cannot see the rows this statement inserts: each period is judged
# against the runs outside its batch.
_RUNNING_POSTGRES = running_body_sql(
    "statement_timestamp()",
    "due.period",
    "other.id = ANY(CAST(:returned AS TEXT[]))",
    "other.holder IN (SELECT id FROM doubtful)",
)
_EARLIER_POSTGRES = f"""FROM {RUNS} AS other
    WHERE other.job = due.job AND other.period < due.period
      AND other.id <> ALL(CAST(:ours AS TEXT[]))"""
_CLAIM_POSTGRES = f"""
    WITH doubtful AS MATERIALIZED ({DOUBTFUL_HOLDERS})
    INSERT INTO {RUNS} (id, job, period, status, reason, origin, attempt,
                             started_attempts, holder, lease_seconds, lease_expires_at,
                             claimed_at, started_at, finished_at)
    SELECT due.id, due.job, due.period,
           CASE WHEN verdict.reason IS NOT NULL THEN 'skipped'
                WHEN verdict.start THEN 'running' ELSE 'claimed' END,
           verdict.reason, due.origin, 1,
           CASE WHEN verdict.reason IS NULL AND verdict.start THEN 1 ELSE 0 END,
           :holder, due.lease_seconds,
           CASE WHEN verdict.reason IS NULL
                THEN clock_timestamp() + make_interval(secs => due.lease_seconds) END,
           statement_timestamp(),
           CASE WHEN verdict.reason IS NULL AND verdict.start THEN statement_timestamp() END,
           CASE WHEN verdict.reason IS NOT NULL THEN statement_timestamp() END
    FROM unnest(CAST(:ids AS TEXT[]), CAST(:jobs AS TEXT[]), CAST(:periods AS TIMESTAMPTZ[]),
                CAST(:origins AS TEXT[]), CAST(:leases AS FLOAT8[]), CAST(:limits AS INT[]),
                CAST(:starts AS BOOLEAN[]), CAST(:excluded AS BOOLEAN[]))
         AS due(id, job, period, origin, lease_seconds, overlap_limit, start, excluded)
    CROSS JOIN LATERAL (
        SELECT CASE
            WHEN due.excluded THEN 'calendar'
            WHEN EXISTS (SELECT FROM scheduler_jobs AS job
                         WHERE job.name = due.job AND job.paused) THEN 'paused'
            WHEN due.overlap_limit IS NOT NULL
                 AND EXISTS (SELECT {_EARLIER_POSTGRES} AND {_RUNNING_POSTGRES})
                 AND (SELECT count(*) {_EARLIER_POSTGRES}
                      AND {occupant_sql("statement_timestamp()", _RUNNING_POSTGRES)}
                     ) >= due.overlap_limit THEN 'overlap'
        END AS reason,
        -- Started by the claim (a worker waits for it) only in its job's turn, by the
        -- rule of a start (`store.writes`): no other period of the job queued, running
        -- or timed out, nor an earlier one claimed, under a live lease.
        due.start AND (due.overlap_limit IS NULL OR NOT EXISTS (
            SELECT FROM {RUNS} AS other
            WHERE other.job = due.job AND other.live
              AND other.lease_expires_at > statement_timestamp()
              AND (other.status IN ('queued', 'running', 'timed_out')
                   OR (other.status = 'claimed' AND other.period < due.period)))) AS start
    ) AS verdict
    WHERE due.period <= statement_timestamp() + make_interval(secs => :tolerance)
    ON CONFLICT (job, period) DO NOTHING
    RETURNING id, status, reason
"""


def _insert_claims_postgres(
    connection: Connection,
    due: list[Due],
    holder: str,
    *,
    sent: float,
    result: ClaimResult,
    ours: Sequence[str],
    returned: Sequence[str] = (),
) -> None:
    if not due:
        return
    candidates = {uuid.uuid4().hex: item for item in due}
    # The statement cannot see its own rows: of one job, only the earliest period of
    # the batch may be started by it (the others wait for that one).
    first: dict[str, datetime] = {}
    for item in due:
        if item.job not in first or item.period < first[item.job]:
            first[item.job] = item.period
    rows = connection.execute(
        _CLAIM_POSTGRES,
        {
            "holder": holder,
            "ours": list(ours),
            "returned": list(returned),
            "tolerance": FUTURE_TOLERANCE.total_seconds(),
            "ids": list(candidates),
            "jobs": [item.job for item in due],
            "periods": [item.period for item in due],
            "origins": [item.origin.value for item in due],
            "leases": [item.lease_seconds for item in due],
            "limits": [item.overlap_limit for item in due],
            "starts": [item.start and item.period == first[item.job] for item in due],
            "excluded": [item.excluded for item in due],
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
    back: a row in `claimed` with its name on it can only be its own lost claim, and one
    in `running` at its first attempt its own claim that started it (`started`; a run
    this node already has in hand is not taken in twice, see `Dispatcher.submit`)."""
    wanted = [(item.job, item.period) for item in due]
    if not wanted:
        return
    if database.server_clock:
        left = "extract(epoch FROM lease_expires_at - statement_timestamp()) AS left_s"
    else:
        left = "(julianday(lease_expires_at) - julianday(:now)) * 86400 AS left_s"
    pairs, parameters = pairs_in("wanted", wanted)
    statement = f"""
        SELECT id, job, period, lease_seconds, origin, started_attempts, status, {left}
        FROM {RUNS}
        WHERE (job, period) IN ({pairs}) AND holder = :holder
          AND status IN ('claimed', 'running') AND attempt = 1
          AND lease_expires_at > {database.now}
    """
    for row in connection.execute(statement, {**parameters, "holder": holder}):
        started = row.status == RunStatus.RUNNING
        if started and row.started_attempts != 1:
            continue
        # The lease ends `left` seconds after this statement began, which was after `sent`.
        lease_from = sent + float(row.left_s) - row.lease_seconds
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
                0 if started else row.started_attempts,
            )
        )
        if started:
            result.started.add(row.id)
