"""A node's heartbeat as one transaction: everything it must tell and learn each beat.

It writes the node's row and renews the leases held in its name, and reads what the
node would otherwise have to poll for: the database clock, the live peers, the nodes
whose liveness lock went, the ring of nodes to watch, the next lease expiry or retry
anywhere, whether an operator request waits, when the next alert event may be tried
and whether an item is stuck that no event tells of yet, and whether its own liveness
lock is still held. One commit a beat: an idle node costs the database that and nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import text, update

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
        if database.server_clock:
            moment = connection.execute(text("SELECT statement_timestamp()")).scalar_one()
        else:
            moment = datetime.now(UTC)
        peers = nodes.peers_on(database, connection, node_id, alive_within)
        if not database.sessions:
            return Beat(held, moment, peers, [], [], None, False, None, False, True)
        return Beat(
            held=held,
            clock=moment,
            peers=peers,
            gone=nodes.gone_on(database, connection),
            ring=nodes.watchable_on(database, connection, alive_within),
            recovery_in=takeover.next_deadline_on(database, connection),
            requests_waiting=requests.any_pending_on(connection),
            alerts_in=deliveries.next_due_on(database, connection),
            stuck_unreported=items.unreported_stuck_on(connection),
            liveness_held=nodes.own_lock_held(connection, node_id) if liveness else True,
        )
