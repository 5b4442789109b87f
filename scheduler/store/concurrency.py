"""Concurrency pools: their limits, and the starts they admit.

A pooled run is claimed like any run (its period's identity is the claim); what a pool
gates is its start. Each start of a pool's member is decided under the pool's advisory
lock (SQLite: its single writer), reading the members in hand: those running count
(`running`: a live lease, the same evidence as overlap's, so a dead holder's slot frees
when recovery ends its lease), those held back wait in order (`waiting`: claimed,
reason `pool`, under a live lease). A start the limits hold back marks its row so
(`reason` 'pool', with the pool and key) and answers POOLED: the row stays claimed,
its holder renews it and tries again as slots free. A remote executor's run is queued
for its worker instead, and holds its slot from then. The limits in force are an
operator's where set (`change`), else the code's (`declare`, at each registration).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from scheduler.model import QueueRequest, Started, StartRequest
from scheduler.policy import Pool, admitted
from scheduler.store.database import Connection, Database
from scheduler.store.faults import StoreRejectedError
from scheduler.store.fence import MINE_SQL, RUNS, fence_params
from scheduler.store.writes import startable, startable_params

POOLS = "scheduler_pools"
# The advisory lock a pool's starts take: no job's name begins with '@' and a control
# character (a schedule's run is '@' and its key).
LOCK_PREFIX = "@\x1fpool "
# At most this many waiting runs of a pool are read ahead of a start.
WAITING_READ = 10_000

_IN_FORCE = """COALESCE(limit_override, declared_limit) AS size,
    CASE WHEN per_key_override IS NOT NULL THEN per_key_override
         ELSE declared_per_key END AS per_key"""


def running_sql(now: str) -> str:
    """A pool's member whose body runs (or may: started, timed out and lingering, or
    handed to a task queue until its message's deadline) under a live lease: it holds a
    slot."""
    return (
        f"live AND pool = :pool AND status IN ('queued', 'running', 'timed_out')"
        f" AND lease_expires_at > {now}"
    )


def waiting_sql(now: str) -> str:
    """A pool's member held back by its limits, still claimed under a live lease."""
    return (
        f"live AND pool = :pool AND status = 'claimed' AND reason = 'pool'"
        f" AND lease_expires_at > {now}"
    )


@dataclass(frozen=True)
class PoolState:
    """A pool as `scheduler pools` shows it."""

    name: str
    limit: int
    per_key: int | None
    declared_limit: int
    declared_per_key: int | None
    # Who last changed (or reset) its limits, and when.
    changed_by: str | None
    changed_at: datetime | None
    # An operator's limits are in force (not the code's).
    overridden: bool
    running: int
    waiting: int
    waiting_since: datetime | None


def declare(database: Database, pools: Iterable[Pool]) -> None:
    """Write the code's limits of these pools (a registration's): an operator's change
    stays in force over them until reset."""
    listed = sorted(pools, key=lambda pool: pool.name)
    if not listed:
        return
    with database.transaction() as connection:
        for pool in listed:
            connection.execute(
                f"""INSERT INTO {POOLS} (name, declared_limit, declared_per_key, declared_at)
                VALUES (:name, :limit, :per_key, {database.now})
                ON CONFLICT (name) DO UPDATE SET declared_limit = excluded.declared_limit,
                    declared_per_key = excluded.declared_per_key,
                    declared_at = excluded.declared_at""",
                {"name": pool.name, "limit": pool.limit, "per_key": pool.per_key},
            )


def change(
    database: Database, name: str, *, limit: int | None, per_key: int | None, by: str
) -> None:
    """An operator's limits for a pool, in force on every node's next start: None leaves
    that limit as it is. A pool no registration declared is refused."""
    with database.transaction() as connection:
        changed = connection.execute(
            f"""UPDATE {POOLS} SET
                limit_override = COALESCE(:limit, limit_override),
                per_key_override = COALESCE(:per_key, per_key_override),
                changed_by = :by, changed_at = {database.now}
            WHERE name = :name""",
            {"name": name, "limit": limit, "per_key": per_key, "by": by},
        ).rowcount
    if changed != 1:
        raise StoreRejectedError(f"pool {name!r}: name: no such pool (none of the jobs names it)")


def reset(database: Database, name: str, *, by: str) -> None:
    """Back to the code's limits."""
    with database.transaction() as connection:
        changed = connection.execute(
            f"""UPDATE {POOLS} SET limit_override = NULL, per_key_override = NULL,
                changed_by = :by, changed_at = {database.now}
            WHERE name = :name""",
            {"name": name, "by": by},
        ).rowcount
    if changed != 1:
        raise StoreRejectedError(f"pool {name!r}: name: no such pool (none of the jobs names it)")


def states(database: Database) -> list[PoolState]:
    """Every pool, with its limits and what it holds now."""
    with database.transaction() as connection:
        pools = connection.execute(
            f"""SELECT name, declared_limit, declared_per_key, changed_by, changed_at,
                limit_override IS NOT NULL OR per_key_override IS NOT NULL AS overridden,
                {_IN_FORCE} FROM {POOLS} ORDER BY name"""
        ).all()
        found: list[PoolState] = []
        for pool in pools:
            params = {"pool": pool.name}
            running = connection.execute(
                f"SELECT count(*) AS n FROM {RUNS} WHERE {running_sql(database.now)}", params
            ).one()
            waiting = connection.execute(
                f"SELECT count(*) AS n, min(claimed_at) AS waiting_since FROM {RUNS}"
                f" WHERE {waiting_sql(database.now)}",
                params,
            ).one()
            found.append(
                PoolState(
                    name=pool.name,
                    limit=pool.size,
                    per_key=pool.per_key,
                    declared_limit=pool.declared_limit,
                    declared_per_key=pool.declared_per_key,
                    changed_by=pool.changed_by,
                    changed_at=pool.changed_at,
                    overridden=bool(pool.overridden),
                    running=running.n,
                    waiting=waiting.n,
                    waiting_since=waiting.waiting_since,
                )
            )
    return found


def start(
    database: Database,
    requests: Sequence[StartRequest],
    queues: Mapping[str, QueueRequest] | None = None,
) -> list[Started]:
    """Start pooled runs as their pools' limits admit, each on its own fence: STARTED,
    POOLED (held back, marked waiting), WAIT (admitted, but an earlier period of its job
    is active: its turn first) or LOST (not this attempt's any more). A run with a
    `queues` entry (by run id: a remote executor's) is handed to its task queue instead
    (`queued`, its lease the message's deadline; STARTED means queued), holding its slot
    until a worker's run ends or the deadline passes."""
    if not requests:
        return []
    queues = queues or {}
    locks = {LOCK_PREFIX + str(request.pool) for request in requests}
    in_turn = {request.claim.job for request in requests if request.in_turn}
    # Oldest period first within each pool: a batch admits in the pools' own order.
    order = sorted(range(len(requests)), key=lambda i: _place(requests[i]))
    answers: dict[int, Started] = {}
    # One row at a time in the pools' order, not by id: the process's renewals wait
    # (`store.batch_gate`), or the two could deadlock.
    with database.batch_gate.batch(), database.guarded(jobs=locks | in_turn) as guarded:
        for index in order:
            request = requests[index]
            queue = queues.get(request.claim.id)
            answers[index] = _start_one(database, guarded.connection, request, queue)
    return [answers[index] for index in range(len(requests))]


def _place(request: StartRequest) -> tuple[str, datetime, str]:
    return (str(request.pool), request.claim.period, request.claim.id)


def _start_one(
    database: Database,
    connection: Connection,
    request: StartRequest,
    queue: QueueRequest | None,
) -> Started:
    claim = request.claim
    fence = fence_params(claim)
    now = database.now
    mine = connection.execute(
        f"SELECT status, period FROM {RUNS} WHERE {MINE_SQL} AND lease_expires_at > {now}"
        f" AND status IN ('claimed', 'queued', 'running')",
        fence,
    ).first()
    if mine is None:
        return Started.LOST
    if mine.status != "claimed":  # this start, tried again after its reply was lost
        return Started.STARTED
    pool: dict[str, Any] = {"pool": request.pool, "pool_key": request.pool_key}
    if _admits(database, connection, request):
        if queue is None:
            went = (
                f"status = 'running', started_at = {now}, started_attempts = started_attempts + 1"
            )
        else:
            lease, leased = database.lease("deadline_s", queue.deadline_s)
            went = (
                f"status = 'queued', queued_at = {now}, queue = :queue, lease_expires_at = {lease}"
            )
            pool |= {**leased, "queue": queue.queue}
        statement = f"""UPDATE {RUNS} SET {went}, reason = NULL,
                pool = :pool, pool_key = :pool_key
            WHERE {startable(database, in_turn=request.in_turn)}"""
        if connection.execute(statement, {**startable_params(claim), **pool}).rowcount == 1:
            return Started.STARTED
        if not request.in_turn:
            return Started.LOST
        # Its job's earlier period is active: it waits its turn (still claimed, mine),
        # not for the pool.
        return Started.WAIT
    connection.execute(
        f"UPDATE {RUNS} SET reason = 'pool', pool = :pool, pool_key = :pool_key"
        f" WHERE {MINE_SQL} AND status = 'claimed'",
        {**fence, **pool},
    )
    return Started.POOLED


def _admits(database: Database, connection: Connection, request: StartRequest) -> bool:
    """Whether the pool's limits in force let this run start now (see `admitted`)."""
    params = {"pool": request.pool}
    limits = connection.execute(
        f"SELECT {_IN_FORCE} FROM {POOLS} WHERE name = :pool", params
    ).first()
    size, per_key = (
        (limits.size, limits.per_key)
        if limits is not None
        else (request.pool_limit, request.pool_per_key)
    )
    running = connection.execute(
        f"SELECT pool_key FROM {RUNS} WHERE {running_sql(database.now)}", params
    ).all()
    if len(running) >= size:
        return False
    ahead = connection.execute(
        f"""SELECT id, period, pool_key FROM {RUNS}
        WHERE {waiting_sql(database.now)} AND id <> :me
        ORDER BY period, id LIMIT {WAITING_READ}""",
        {**params, "me": request.claim.id},
    ).all()
    me = (request.claim.period, request.claim.id, request.pool_key)
    queue = sorted([(row.period, row.id, row.pool_key) for row in ahead] + [me])
    return admitted(
        size,
        per_key,
        (row.pool_key for row in running),
        ((run_id, key) for _, run_id, key in queue),
        request.claim.id,
    )
