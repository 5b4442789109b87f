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

from scheduler.model import NodeIdentity
from scheduler.store.connection import in_list
from scheduler.store.database import Connection, Database
from scheduler.store.fence import RUNS
from scheduler.store.wakeups import Wake, notify_on

NODES = "scheduler_nodes"
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
    now = database.now
    statement = f"""
        INSERT INTO {NODES} (id, name, host, pid, version, started_at, heartbeat_at,
                             stopped_at, jobs_digest, liveness_key)
        VALUES (:id, :name, :host, :pid, :version, {now}, {now}, NULL, :digest, :key)
        ON CONFLICT (id) DO UPDATE SET started_at = {now}, heartbeat_at = {now},
            stopped_at = NULL, jobs_digest = excluded.jobs_digest,
            liveness_key = excluded.liveness_key
    """
    parameters = {
        "id": node.id,
        "name": node.name,
        "host": node.host,
        "pid": node.pid,
        "version": node.version,
        "digest": jobs_digest,
        "key": liveness_key,
    }
    with database.transaction() as connection:
        connection.execute(statement, parameters)


def set_liveness(database: Database, node_id: str, key: int | None) -> None:
    """The node holds its liveness lock under a new key (after losing the old one), or
    none: the lease alone decides whether it lives."""
    with database.transaction() as connection:
        connection.execute(
            f"UPDATE {NODES} SET liveness_key = :key WHERE id = :id",
            {"key": key, "id": node_id},
        )


def heartbeat(database: Database, node_id: str) -> None:
    with database.transaction() as connection:
        connection.execute(
            f"UPDATE {NODES} SET heartbeat_at = {database.now} WHERE id = :id",
            {"id": node_id},
        )


# The node row's liveness lock is held in this database (PostgreSQL only). `node` is
# the nodes table's alias in the statement that uses it.
_LOCK_HELD = f"""EXISTS (
    SELECT 1 FROM pg_locks AS lock
    WHERE lock.locktype = 'advisory' AND lock.granted AND lock.objsubid = 2
      AND lock.mode = 'ExclusiveLock'
      AND lock.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND lock.classid = CAST({LIVENESS_NAMESPACE} AS oid)
      AND lock.objid = CAST(node.liveness_key AS oid))"""
# A running node that bound its liveness to a lock it no longer holds (a watcher's
# shared lock on the same key, see `store.liveness.PeerWatch`, is no holder).
_GONE = f"(node.stopped_at IS NULL AND node.liveness_key IS NOT NULL AND NOT {_LOCK_HELD})"


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
    statement, parameters = peers_query(database, node_id, alive_within)
    return connection.execute(statement, parameters).scalars()


def peers_query(
    database: Database, node_id: str, alive_within: float
) -> tuple[str, dict[str, Any]]:
    """The ids `peers` reads, in order (the heartbeat folds it into its one read), and
    its parameters."""
    since, parameters = database.after("peers_since", -alive_within)
    gone = f" AND NOT {_GONE}" if database.sessions else ""
    statement = f"""
        SELECT node.id FROM {NODES} AS node
        WHERE node.jobs_digest = (SELECT jobs_digest FROM {NODES} WHERE id = :peers_of)
          AND node.stopped_at IS NULL AND node.heartbeat_at >= {since}{gone}
        ORDER BY node.id
    """
    return statement, {**parameters, "peers_of": node_id}


def gone(database: Database) -> list[str]:
    """The nodes whose liveness lock has disappeared: their process has most likely
    ended (PostgreSQL; elsewhere nothing is known before a lease runs out)."""
    if not database.sessions:
        return []
    with database.transaction() as connection:
        return gone_on(database, connection)


def gone_on(database: Database, connection: Connection) -> list[str]:
    """`gone` inside a transaction of the caller's (PostgreSQL only)."""
    return connection.execute(gone_query(database)).scalars()


def gone_query(database: Database) -> str:
    """PostgreSQL only: its clock is in the SQL."""
    recent = f"node.heartbeat_at >= {database.now_plus(str(-GONE_LOOKBACK_S))}"
    return f"SELECT node.id FROM {NODES} AS node WHERE {_GONE} AND {recent} ORDER BY node.id"


def watchable_on(database: Database, connection: Connection, alive_within: float) -> list[Watched]:
    """Running nodes (any jobs) that hold their liveness lock, in id order: the ring in
    which each node watches the next for its lock to go (PostgreSQL only)."""
    statement = watchable_query(database, alive_within, "node.id, node.liveness_key")
    return [Watched(row.id, row.liveness_key) for row in connection.execute(statement)]


def watchable_query(database: Database, alive_within: float, columns: str) -> str:
    """The ring's nodes, in id order, as `columns` of them (PostgreSQL only)."""
    since = database.now_plus(f"{-float(alive_within)!r}")
    return f"""
        SELECT {columns} FROM {NODES} AS node
        WHERE node.stopped_at IS NULL AND node.liveness_key IS NOT NULL
          AND node.heartbeat_at >= {since} AND {_LOCK_HELD}
        ORDER BY node.id
    """


def own_lock_held(connection: Connection, node_id: str) -> bool:
    """Whether this node's own liveness lock is held (by its liveness session)."""
    return bool(connection.execute(own_lock_query(), {"own_id": node_id}).scalar())


def own_lock_query() -> str:
    """Parameter: `own_id`."""
    return f"SELECT {_LOCK_HELD} FROM {NODES} AS node WHERE node.id = :own_id"


def release_runs_of(database: Database, holders: Collection[str]) -> int:
    """End the leases of every run these nodes hold, if their liveness lock is still
    gone: the recovery loop takes the runs over at once (not a queued one, whose message
    a worker may still pick up before its deadline). Returns how many."""
    if not holders or not database.sessions:
        return 0
    listed, parameters = in_list("node", sorted(holders))
    now = database.now
    # A queued run needs its sender no more: its message may still be picked up.
    statement = f"""
        UPDATE {RUNS} SET lease_expires_at = {now}
        WHERE holder IN (SELECT node.id FROM {NODES} AS node
                         WHERE node.id IN ({listed}) AND {_GONE})
          AND live AND lease_expires_at > {now} AND status <> 'queued'
    """
    with database.transaction() as connection:
        released = connection.execute(statement, parameters).rowcount
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
    held = _LOCK_HELD if database.sessions else "FALSE"
    statement = f"""
        SELECT node.id, node.pid, node.liveness_key, {held} AS held FROM {NODES} AS node
        WHERE node.name = :name AND node.host = :host AND node.id <> :id
          AND node.stopped_at IS NULL
    """
    parameters = {"name": node.name, "host": node.host, "id": node.id}
    with database.transaction() as connection:
        return [
            Incarnation(row.id, row.pid, row.liveness_key, bool(row.held))
            for row in connection.execute(statement, parameters)
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
    listed, parameters = in_list("node", list(ids))
    now = database.now
    with database.transaction() as connection:
        connection.execute(
            f"UPDATE {NODES} SET stopped_at = {now} WHERE id IN ({listed}) AND stopped_at IS NULL",
            parameters,
        )
        released = connection.execute(
            f"""UPDATE {RUNS} SET lease_expires_at = {now}
                WHERE holder IN ({listed}) AND live AND lease_expires_at > {now}""",
            parameters,
        ).rowcount
        if released:
            notify_on(database, connection, Wake.RECOVERY)
    return released


def has_stopped(database: Database, node_id: str) -> bool:
    """Whether the node said it stopped (a clean shutdown, not a death)."""
    statement = f"SELECT stopped_at IS NOT NULL FROM {NODES} WHERE id = :id"
    with database.transaction() as connection:
        return bool(connection.execute(statement, {"id": node_id}).scalar())


def mark_stopped(database: Database, node_id: str) -> None:
    with database.transaction() as connection:
        connection.execute(
            f"UPDATE {NODES} SET stopped_at = {database.now} WHERE id = :id",
            {"id": node_id},
        )
