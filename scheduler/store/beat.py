"""A node's heartbeat as one transaction: everything it must tell and learn each beat.

It writes the node's row and renews the leases held in its name, and reads what the
node would otherwise have to poll for: the database clock, the live peers, the nodes
whose liveness lock went, the ring of nodes to watch, the next lease expiry or retry
anywhere, whether an operator request waits, when the next alert event may be tried
and whether an item is stuck that no event tells of yet, and whether its own liveness
lock is still held. One commit a beat: an idle node costs the database that and nothing more.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Select, func, select, true, update

from scheduler.model import Held
from scheduler.store import deliveries, items, nodes, renewals, requests, takeover
from scheduler.store.database import Database
from scheduler.store.nodes import Watched
from scheduler.store.schema import nodes as nodes_table


@dataclass(frozen=True)
class Beat:
    held: list[Held]
    # The database's time, read inside the beat (the host's own on SQLite).
    clock: datetime
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


def beat(database: Database, node_id: str, *, alive_within: float, liveness: bool) -> Beat:
    """One heartbeat; `liveness`: the node holds a liveness lock to check on."""
    with database.transaction() as connection:
        connection.execute(
            update(nodes_table)
            .where(nodes_table.c.id == node_id)
            .values(heartbeat_at=database.now())
        )
        held = renewals.renew_on(database, connection, node_id)
        moment = datetime.now(UTC)  # the host's own; PostgreSQL's comes with the reads
        if not database.sessions:
            peers = nodes.peers_on(database, connection, node_id, alive_within)
            return Beat(held, moment, peers, [], [], None, False, None, False, True)
        return _read_postgres(
            database, connection, held, node_id, alive_within=alive_within, liveness=liveness
        )


def _read_postgres(
    database: Database,
    connection: Connection,
    held: list[Held],
    node_id: str,
    *,
    alive_within: float,
    liveness: bool,
) -> Beat:
    """Everything a beat learns, as one statement: each store module's own query, asked
    at once (one round trip, not ten: an idle node's CPU is mostly its heartbeat)."""
    statement = _reads(database, node_id, alive_within=alive_within, liveness=liveness)
    row = connection.execute(statement).one()
    now = row[0]
    return Beat(
        held=held,
        clock=now,
        peers=list(row[1]),
        gone=list(row[2]),
        ring=[Watched(node, key) for node, key in zip(row[3], row[4], strict=True)],
        recovery_in=takeover.seconds_to_deadline(row[5], row[6], now),
        requests_waiting=bool(row[7]),
        alerts_in=deliveries.seconds_to(row[8], now),
        stuck_unreported=bool(row[9]),
        liveness_held=bool(row[10]),
    )


@functools.lru_cache(maxsize=16)
def _reads(database: Database, node_id: str, *, alive_within: float, liveness: bool) -> Select[Any]:
    """Built once per node: a statement object SQLAlchemy has seen keeps its cache key,
    where one built anew each beat costs more to key than to run. PostgreSQL only: its
    clock is in the SQL, where a host's clock would be a value frozen at the build."""
    assert database.server_clock, "the beat's reads are built once: the clock must be SQL"
    lease, retry = takeover.next_deadline_queries()
    ring = (nodes_table.c.id, nodes_table.c.liveness_key)
    return select(
        func.statement_timestamp(),
        _array(nodes.peers_query(database, node_id, alive_within)),
        _array(nodes.gone_query(database)),
        _array(nodes.watchable_query(database, alive_within, ring[0])),
        _array(nodes.watchable_query(database, alive_within, ring[1])),
        lease.scalar_subquery(),
        retry.scalar_subquery(),
        requests.pending_query().exists(),
        deliveries.next_due_query().scalar_subquery(),
        items.unreported_stuck_query(),
        nodes.own_lock_query(node_id).scalar_subquery() if liveness else true(),
    )


def _array(query: Select[Any]) -> Any:
    return func.array(query.scalar_subquery())
