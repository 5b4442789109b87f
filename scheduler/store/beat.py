"""A node's heartbeat as one transaction: everything it must tell and learn each beat.

It writes the node's row and renews the leases held in its name, and reads what the
node would otherwise have to poll for: the database clock, the live peers, the nodes
whose liveness lock went, the ring of nodes to watch, the next lease expiry or retry
anywhere, whether an operator request of its jobs waits, when the next alert event of
its jobs may be tried and whether an item is stuck that no event tells of yet, when
the next schedule created at run time of its jobs is due, and whether its own liveness
lock is still held. One commit a beat: an idle node costs the
database that and nothing more.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

from scheduler.model import ClockReading, Held
from scheduler.store import deliveries, items, nodes, renewals, requests, schedules, takeover
from scheduler.store.database import Connection, Database
from scheduler.store.nodes import NODES, Watched


@dataclass(frozen=True)
class Beat:
    held: list[Held]
    # The database's time, read inside the beat (the host's own on SQLite), placed at the
    # statement that read it, not in the middle of the whole beat (whose other statements
    # may wait on a lock or a commit).
    clock: ClockReading
    peers: list[str]
    # Below: only with `Database.sessions` (PostgreSQL); empty, None or True elsewhere.
    gone: list[str]
    ring: list[Watched]
    # Seconds to the next lease end or retry anywhere; negative if already passed.
    recovery_in: float | None
    requests_waiting: bool
    # Seconds to the next alert event's try (negative if come); None when none pends.
    alerts_in: float | None
    stuck_unreported: bool
    liveness_held: bool
    # Seconds until the next schedule of the node's jobs is due (negative if come).
    schedules_in: float | None = None
    # The liveness key the node's row names (None without one, and on SQLite): the
    # ring was read while that lock was held, if `liveness_held`.
    liveness_key: int | None = None


def beat(
    database: Database,
    node_id: str,
    *,
    alive_within: float,
    liveness: bool,
    schedule_jobs: tuple[str, ...] = (),
) -> Beat:
    """One heartbeat; `liveness`: the node holds a liveness lock to check on;
    `schedule_jobs`: the jobs whose schedules it fires."""
    # The renewal takes its turn with the node's batch writes (`store.batch_gate`).
    with database.batch_gate.renewal(), database.transaction() as connection:
        connection.execute(
            f"UPDATE {NODES} SET heartbeat_at = {database.now} WHERE id = :id",
            {"id": node_id},
        )
        held = renewals.renew_on(database, connection, node_id)
        if not database.sessions:
            # The host's own clock; PostgreSQL's comes with the reads.
            clock = ClockReading.host(database.time_source.wall(), database.time_source.monotonic())
            peers = nodes.peers_on(database, connection, node_id, alive_within)
            return Beat(held, clock, peers, [], [], None, False, None, False, True)
        return _read_postgres(
            database,
            connection,
            held,
            node_id,
            alive_within=alive_within,
            liveness=liveness,
            schedule_jobs=schedule_jobs,
        )


def _read_postgres(
    database: Database,
    connection: Connection,
    held: list[Held],
    node_id: str,
    *,
    alive_within: float,
    liveness: bool,
    schedule_jobs: tuple[str, ...],
) -> Beat:
    """Everything a beat learns, as one statement: each store module's own query, asked
    at once (one round trip, not ten: an idle node's CPU is mostly its heartbeat)."""
    statement, parameters = _reads(database, node_id, alive_within=alive_within, liveness=liveness)
    parameters = {**parameters, "schedule_jobs": list(schedule_jobs)}
    sent = time.monotonic()
    row = connection.execute(statement, parameters).one()
    received = time.monotonic()
    now = row.now
    own_key, own_held = nodes.parse_own_lock(row.own_lock) if liveness else (None, True)
    return Beat(
        held=held,
        clock=ClockReading(sent, now, received),
        peers=list(row.peers),
        gone=list(row.gone),
        ring=nodes.parse_ring(row.ring),
        recovery_in=takeover.seconds_to_deadline(row.lease_at, row.retry_at, now),
        requests_waiting=bool(row.requests_waiting),
        alerts_in=deliveries.seconds_to(row.free_at, now),
        stuck_unreported=bool(row.stuck_unreported),
        liveness_held=own_held,
        liveness_key=own_key,
        schedules_in=deliveries.seconds_to(row.schedule_at, now),
    )


@functools.lru_cache(maxsize=16)
def _reads(
    database: Database, node_id: str, *, alive_within: float, liveness: bool
) -> tuple[str, dict[str, Any]]:
    """The beat's reads as one statement and its parameters, built once per node.
    PostgreSQL only: its clock is in the SQL."""
    assert database.server_clock, "the beat's reads are built once: the clock must be SQL"
    lease, retry = takeover.next_deadline_queries()
    peers, parameters = nodes.peers_query(database, node_id, alive_within)
    own = f"({nodes.own_lock_query()})" if liveness else "NULL"
    statement = f"""
        SELECT statement_timestamp() AS now,
               ARRAY({peers}) AS peers,
               ARRAY({nodes.gone_query(database)}) AS gone,
               ARRAY({nodes.watchable_query(database, alive_within)}) AS ring,
               ({lease}) AS lease_at,
               ({retry}) AS retry_at,
               EXISTS ({requests.pending_query(database)}) AS requests_waiting,
               ({deliveries.next_due_query()}) AS free_at,
               {items.unreported_stuck_query()} AS stuck_unreported,
               ({schedules.next_due_query(":schedule_jobs")}) AS schedule_at,
               {own} AS own_lock
    """
    return statement, {**parameters, "own_id": node_id}
