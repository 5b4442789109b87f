"""Handing a held run to a task queue and taking it on a worker, both fenced.

`queue` (the node that won the claim): `claimed` becomes `queued`, and the lease becomes
the message's deadline: the row is no longer renewed (see `store.renewals`), so if no
worker starts it in time the lease ends and any node's recovery retakes it as the next
attempt and sends it again. `take` (the worker a message reached): `queued` becomes
`running` under the worker's own holder name, compare-and-set on the message's fence
(run id, attempt, the sender as holder) and on the deadline not having passed. A second
copy of the message, an older attempt or a late delivery finds nothing to set and is
refused with what the row shows. From then on the worker is the run's holder: it
renews the lease and writes the outcome through `store.renewals` and `store.writes`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from scheduler.model import Claim, Delivery, QueueRequest, Refusal, Started
from scheduler.states import RunStatus
from scheduler.store.database import Connection, Database
from scheduler.store.fence import (
    ACTIVE,
    LOCK_IN_ORDER_SQL,
    MINE_SQL,
    RUNS,
    fence_arrays,
    fence_of,
    fence_params,
)
from scheduler.store.writes import startable, startable_params


def queue(database: Database, requests: Sequence[QueueRequest]) -> list[Started]:
    """Mark runs queued, each on its own fence; STARTED means queued (now, or by an
    earlier try of this very write), WAIT not its turn yet, LOST not ours any more."""
    if not requests:
        return []
    in_turn = {request.claim.job for request in requests if request.in_turn}
    if database.arrays:
        with database.guarded(jobs=in_turn) as guarded:
            return _queue_postgres(guarded.connection, requests)
    with database.transaction() as connection:
        return [_queue_one(database, connection, request) for request in requests]


def _queue_one(database: Database, connection: Connection, request: QueueRequest) -> Started:
    claim = request.claim
    lease, leased = database.lease("deadline_s", request.deadline_s)
    statement = f"""
        UPDATE {RUNS} SET status = 'queued', queued_at = {database.now}, queue = :queue,
            lease_expires_at = {lease}
        WHERE {startable(database, in_turn=request.in_turn)}
    """
    parameters = {**startable_params(claim), **leased, "queue": request.queue}
    if connection.execute(statement, parameters).rowcount == 1:
        return Started.STARTED
    status = connection.execute(
        f"SELECT status FROM {RUNS} WHERE {MINE_SQL}",
        fence_params(claim),
    ).scalar()
    if status == RunStatus.QUEUED.value:
        return Started.STARTED
    if status == RunStatus.CLAIMED.value and request.in_turn:
        return Started.WAIT
    return Started.LOST


_QUEUE_POSTGRES = f"""
    WITH locked AS ({LOCK_IN_ORDER_SQL})
    UPDATE {RUNS} AS run SET status = 'queued', queued_at = statement_timestamp(),
        queue = wanted.queue,
        lease_expires_at = clock_timestamp() + make_interval(secs => wanted.deadline)
    FROM locked, unnest(CAST(:ids AS TEXT[]), CAST(:attempts AS INT[]),
                        CAST(:holders AS TEXT[]), CAST(:in_turn AS BOOLEAN[]),
                        CAST(:queues AS TEXT[]), CAST(:deadlines AS FLOAT8[]))
         AS wanted(id, attempt, holder, in_turn, queue, deadline)
    WHERE run.id = ANY(CAST(:ids AS TEXT[])) AND run.id = wanted.id AND run.id = locked.id
      AND run.attempt = wanted.attempt AND run.holder = wanted.holder
      AND (run.status = 'claimed') IS TRUE
      AND run.lease_expires_at > statement_timestamp()
      AND NOT (wanted.in_turn AND EXISTS (
          SELECT FROM {RUNS} AS other
          WHERE other.job = run.job AND other.live AND other.id <> run.id
            AND other.lease_expires_at > statement_timestamp()
            AND (other.status IN ('queued', 'running', 'timed_out')
                 OR (other.status = 'claimed' AND other.period < run.period))))
    RETURNING run.id, run.attempt, run.holder
"""

_STATUS_POSTGRES = f"""
    SELECT run.id, run.attempt, run.holder, run.status FROM {RUNS} AS run
    JOIN unnest(CAST(:ids AS TEXT[]), CAST(:attempts AS INT[]), CAST(:holders AS TEXT[]))
         AS wanted(id, attempt, holder)
      ON run.id = wanted.id AND run.attempt = wanted.attempt AND run.holder = wanted.holder
    WHERE run.id = ANY(CAST(:ids AS TEXT[]))
"""


def _queue_postgres(connection: Connection, requests: Sequence[QueueRequest]) -> list[Started]:
    claims = [request.claim for request in requests]
    parameters = {
        **fence_arrays(claims),
        "in_turn": [request.in_turn for request in requests],
        "queues": [request.queue for request in requests],
        "deadlines": [request.deadline_s for request in requests],
    }
    queued = {tuple(row) for row in connection.execute(_QUEUE_POSTGRES, parameters)}
    others = [claim for claim in claims if fence_of(claim) not in queued]
    statuses: dict[tuple[str, int, str], str] = {}
    if others:
        rows = connection.execute(_STATUS_POSTGRES, fence_arrays(others))
        statuses = {(row.id, row.attempt, row.holder): row.status for row in rows}
    answers = []
    for request in requests:
        fence = fence_of(request.claim)
        status = statuses.get(fence)
        if fence in queued or status == RunStatus.QUEUED.value:
            answers.append(Started.STARTED)
        elif status == RunStatus.CLAIMED.value and request.in_turn:
            answers.append(Started.WAIT)
        else:
            answers.append(Started.LOST)
    return answers


def unsend(database: Database, claim: Claim, after: float) -> bool:
    """The message could not be sent: end the queued lease `after` seconds from now, so
    that a node retakes the run and sends it again then. Fenced like any write."""
    lease, leased = database.lease("after_s", after)
    statement = (
        f"UPDATE {RUNS} SET lease_expires_at = {lease} WHERE {MINE_SQL} AND status = 'queued'"
    )
    with database.transaction() as connection:
        return connection.execute(statement, {**fence_params(claim), **leased}).rowcount == 1


_TAKEN = "lease_seconds, started_attempts, queued_at, started_at"


def take(database: Database, sent: Claim, holder: str) -> Delivery:
    """Start a delivered run on a worker: `sent` is the fence the message carries (the
    sender as holder), `holder` the worker's name for this delivery. Idempotent for the
    same delivery (a start whose reply was lost finds the run running in its name)."""
    began = time.monotonic()
    with database.transaction() as connection:
        return _take(database, connection, sent, holder, began)


def _take(
    database: Database, connection: Connection, sent: Claim, holder: str, began: float
) -> Delivery:
    parameters: dict[str, Any] = {**fence_params(sent), "holder": holder}
    if database.server_clock:
        lease = database.lease_until("lease_seconds")
    else:  # this host computes SQLite's times, a value at a time
        seconds = connection.execute(
            f"SELECT lease_seconds FROM {RUNS} WHERE id = :id",
            {"id": sent.id},
        ).scalar()
        if seconds is None:
            return Delivery(None, Refusal.GONE)
        lease, leased = database.lease("lease_s", seconds)
        parameters |= leased
    statement = f"""
        UPDATE {RUNS} SET status = 'running', holder = :holder, started_at = {database.now},
            started_attempts = started_attempts + 1, lease_expires_at = {lease}
        WHERE {MINE_SQL} AND status = 'queued' AND lease_expires_at > {database.now}
        RETURNING {_TAKEN}
    """
    row = connection.execute(statement, parameters).first()
    if row is not None:
        return _taken(sent, holder, began, row)
    again = connection.execute(
        f"""SELECT {_TAKEN} FROM {RUNS}
            WHERE id = :id AND attempt = :attempt AND holder = :holder
              AND status = 'running'""",
        {"id": sent.id, "attempt": sent.attempt, "holder": holder},
    ).first()
    if again is not None:
        return _taken(sent, holder, began, again)
    return _refusal(database, connection, sent)


def _taken(sent: Claim, holder: str, began: float, row: Any) -> Delivery:
    claim = Claim(
        sent.id,
        sent.job,
        sent.period,
        sent.attempt,
        holder,
        float(row.lease_seconds),
        sent.origin,
        began,
        row.started_attempts - 1,
    )
    waited = None
    if row.queued_at is not None and row.started_at is not None:
        waited = max(0, round((row.started_at - row.queued_at).total_seconds() * 1000))
    return Delivery(claim, status=RunStatus.RUNNING, queued_ms=waited)


def _refusal(database: Database, connection: Connection, sent: Claim) -> Delivery:
    """Why a delivery may not start: what the run's row shows now."""
    row = connection.execute(
        f"""SELECT attempt, holder, status, lease_expires_at > {database.now} AS live
            FROM {RUNS} WHERE id = :id""",
        {"id": sent.id},
    ).first()
    if row is None:
        return Delivery(None, Refusal.GONE)
    status = RunStatus(row.status)
    if row.attempt != sent.attempt:
        refusal = Refusal.SUPERSEDED
    elif status.value not in ACTIVE:
        refusal = Refusal.SETTLED
    elif status is RunStatus.QUEUED and row.holder == sent.holder and not row.live:
        refusal = Refusal.EXPIRED
    elif status is RunStatus.CLAIMED:
        refusal = Refusal.UNSENT
    else:
        refusal = Refusal.TAKEN
    return Delivery(None, refusal, status)
