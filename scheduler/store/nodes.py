"""The nodes table: who is alive, since when, and on which version.

On PostgreSQL a node may bind its liveness to a session advisory lock it holds on a
connection of its own (`liveness_key`): when the process dies the server ends that
session and the lock is gone from `pg_locks`, so the others know within a second,
not a lease. Correctness never depends on it; it only lets a dead node's runs be
taken over sooner (their leases are ended at once), and keeps it out of the peers.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Select,
    and_,
    bindparam,
    exists,
    select,
    text,
    update,
)

from scheduler.model import NodeIdentity
from scheduler.states import RunStatus
from scheduler.store.database import Database
from scheduler.store.schema import nodes, runs
from scheduler.store.wakeups import Wake, notify_on

# The first half of every liveness lock's key (`pg_advisory_lock(int4, int4)`): "schd".
LIVENESS_NAMESPACE = int.from_bytes(b"schd", "big")
# A node gone for longer than this (no heartbeat since) is no longer looked for: its
# runs were released when it went, or, if no node was alive to see it go, when a node
# started with its name, or when their leases ran out.
GONE_LOOKBACK_S = 600


@dataclass(frozen=True)
class Watched:
    """A node whose liveness lock another node may wait on."""

    id: str
    key: int


def register(
    database: Database, node: NodeIdentity, jobs_digest: str, liveness_key: int | None = None
) -> None:
    """Insert this node's row, or revive it if the id was used before."""
    now = database.now()
    statement = (
        database.insert(nodes)
        .values(
            id=node.id,
            name=node.name,
            host=node.host,
            pid=node.pid,
            version=node.version,
            started_at=now,
            heartbeat_at=now,
            stopped_at=None,
            jobs_digest=jobs_digest,
            liveness_key=liveness_key,
        )
        .on_conflict_do_update(
            index_elements=["id"],
            set_={
                "started_at": now,
                "heartbeat_at": now,
                "stopped_at": None,
                "jobs_digest": jobs_digest,
                "liveness_key": liveness_key,
            },
        )
    )
    with database.transaction() as connection:
        connection.execute(statement)


def set_liveness(database: Database, node_id: str, key: int | None) -> None:
    """The node holds its liveness lock under a new key (after losing the old one), or
    none: the lease alone decides whether it lives."""
    with database.transaction() as connection:
        connection.execute(update(nodes).where(nodes.c.id == node_id).values(liveness_key=key))


def heartbeat(database: Database, node_id: str) -> None:
    with database.transaction() as connection:
        connection.execute(
            update(nodes).where(nodes.c.id == node_id).values(heartbeat_at=database.now())
        )


def _lock_held() -> ColumnElement[bool]:
    """The node row's liveness lock is held in this database (PostgreSQL only)."""
    return exists(
        select(text("1"))
        .select_from(text("pg_locks AS lock"))
        .where(
            text(
                "lock.locktype = 'advisory' AND lock.granted AND lock.objsubid = 2"
                " AND lock.mode = 'ExclusiveLock'"
                " AND lock.database = (SELECT oid FROM pg_database"
                "                      WHERE datname = current_database())"
                " AND lock.classid = CAST(:namespace AS oid)"
                " AND lock.objid = CAST(scheduler_nodes.liveness_key AS oid)"
            ).bindparams(namespace=LIVENESS_NAMESPACE)
        )
    )


def _gone() -> ColumnElement[bool]:
    """A running node that bound its liveness to a lock it no longer holds (a watcher's
    shared lock on the same key, see `store.liveness.PeerWatch`, is no holder)."""
    return and_(nodes.c.stopped_at.is_(None), nodes.c.liveness_key.is_not(None), ~_lock_held())


def peers(database: Database, node_id: str, alive_within: float) -> list[str]:
    """Ids of the running nodes (this one included) that run the same jobs as this one
    and sent a heartbeat within `alive_within` seconds, in id order; none whose
    liveness lock is gone."""
    with database.transaction() as connection:
        return peers_on(database, connection, node_id, alive_within)


def peers_on(
    database: Database, connection: Connection, node_id: str, alive_within: float
) -> list[str]:
    """`peers` inside a transaction of the caller's."""
    return list(connection.execute(peers_query(database, node_id, alive_within)).scalars())


def peers_query(database: Database, node_id: str, alive_within: float) -> Select[Any]:
    """The ids `peers` reads, in order (the heartbeat folds it into its one read)."""
    digest = select(nodes.c.jobs_digest).where(nodes.c.id == node_id).scalar_subquery()
    conditions = [
        nodes.c.jobs_digest == digest,
        nodes.c.stopped_at.is_(None),
        nodes.c.heartbeat_at >= database.now_plus(-alive_within),
    ]
    if database.sessions:
        conditions.append(~_gone())
    return select(nodes.c.id).where(*conditions).order_by(nodes.c.id)


def gone(database: Database) -> list[str]:
    """The nodes whose liveness lock has disappeared: their process has most likely
    ended (PostgreSQL; elsewhere nothing is known before a lease runs out)."""
    if not database.sessions:
        return []
    with database.transaction() as connection:
        return gone_on(database, connection)


def gone_on(database: Database, connection: Connection) -> list[str]:
    """`gone` inside a transaction of the caller's (PostgreSQL only)."""
    return list(connection.execute(gone_query(database)).scalars())


def gone_query(database: Database) -> Select[Any]:
    recent = nodes.c.heartbeat_at >= database.now_plus(-GONE_LOOKBACK_S)
    return select(nodes.c.id).where(_gone(), recent).order_by(nodes.c.id)


def watchable_on(database: Database, connection: Connection, alive_within: float) -> list[Watched]:
    """Running nodes (any jobs) that hold their liveness lock, in id order: the ring in
    which each node watches the next for its lock to go (PostgreSQL only)."""
    statement = watchable_query(database, alive_within, nodes.c.id, nodes.c.liveness_key)
    return [Watched(row.id, row.liveness_key) for row in connection.execute(statement)]


def watchable_query(database: Database, alive_within: float, *columns: Any) -> Select[Any]:
    """The ring's nodes, in id order, as `columns` of them."""
    return (
        select(*columns)
        .where(
            nodes.c.stopped_at.is_(None),
            nodes.c.liveness_key.is_not(None),
            nodes.c.heartbeat_at >= database.now_plus(-alive_within),
            _lock_held(),
        )
        .order_by(nodes.c.id)
    )


def own_lock_held(connection: Connection, node_id: str) -> bool:
    """Whether this node's own liveness lock is held (by its liveness session)."""
    return bool(connection.execute(own_lock_query(node_id)).scalar())


def own_lock_query(node_id: str) -> Select[Any]:
    return select(_lock_held()).select_from(nodes).where(nodes.c.id == node_id)


def release_runs_of(database: Database, holders: Collection[str]) -> int:
    """End the leases of every run these nodes hold, if their liveness lock is still
    gone: the recovery loop takes the runs over at once (not a queued one, whose message
    a worker may still pick up before its deadline). Returns how many."""
    if not holders or not database.sessions:
        return 0
    now = database.now()
    dead = select(nodes.c.id).where(nodes.c.id.in_(sorted(holders)), _gone())
    statement = (
        update(runs)
        # A queued run needs its sender no more: its message may still be picked up.
        .where(
            runs.c.holder.in_(dead),
            runs.c.lease_expires_at > now,
            runs.c.status != RunStatus.QUEUED.value,
        )
        .values(lease_expires_at=now)
    )
    with database.transaction() as connection:
        released = int(connection.execute(statement).rowcount)
        if released:
            notify_on(database, connection, Wake.RECOVERY)
        return released


@dataclass(frozen=True)
class Incarnation:
    """An earlier node with this node's name and host that never said it stopped."""

    id: str
    pid: int
    liveness_key: int | None
    lock_held: bool


def earlier_incarnations(database: Database, node: NodeIdentity) -> list[Incarnation]:
    """Rows of this node's name on this host, other than its own, still not stopped."""
    held = _lock_held() if database.sessions else bindparam("held", False)
    statement = select(nodes.c.id, nodes.c.pid, nodes.c.liveness_key, held.label("held")).where(
        nodes.c.name == node.name,
        nodes.c.host == node.host,
        nodes.c.id != node.id,
        nodes.c.stopped_at.is_(None),
    )
    with database.transaction() as connection:
        return [
            Incarnation(row.id, row.pid, row.liveness_key, bool(row.held))
            for row in connection.execute(statement)
        ]


def is_dead(previous: Incarnation, node: NodeIdentity) -> bool:
    """Whether an earlier incarnation on this host is surely gone: its liveness lock is
    not held (if it had one), and its process is not running here, or has this
    process's own id (a container restarted: pid 1 again)."""
    if previous.liveness_key is not None and previous.lock_held:
        return False
    return previous.pid == node.pid or not _process_exists(previous.pid)


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def supersede(database: Database, ids: Sequence[str]) -> int:
    """Mark earlier, dead incarnations stopped and end the leases of their runs, so that
    they are taken over at once. Returns how many runs were released."""
    if not ids:
        return 0
    now = database.now()
    with database.transaction() as connection:
        connection.execute(
            update(nodes)
            .where(nodes.c.id.in_(list(ids)), nodes.c.stopped_at.is_(None))
            .values(stopped_at=now)
        )
        released = connection.execute(
            update(runs)
            .where(runs.c.holder.in_(list(ids)), runs.c.lease_expires_at > now)
            .values(lease_expires_at=now)
        )
        if released.rowcount:
            notify_on(database, connection, Wake.RECOVERY)
    return int(released.rowcount)


def has_stopped(database: Database, node_id: str) -> bool:
    """Whether the node said it stopped (a clean shutdown, not a death)."""
    statement = select(nodes.c.stopped_at.is_not(None)).where(nodes.c.id == node_id)
    with database.transaction() as connection:
        return bool(connection.execute(statement).scalar())


def mark_stopped(database: Database, node_id: str) -> None:
    with database.transaction() as connection:
        connection.execute(
            update(nodes).where(nodes.c.id == node_id).values(stopped_at=database.now())
        )
