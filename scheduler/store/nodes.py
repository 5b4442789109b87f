"""The nodes table: who is alive, since when, and on which version.

On PostgreSQL a node may bind its liveness to a session advisory lock it holds on a
connection of its own (`liveness_key`, taken at `liveness_since`): when the process dies
the server ends that session and the lock is gone from `pg_locks`. A lock can also go
while its node lives (a restart, `pg_terminate_backend`, a proxy), so a vanished lock is
only evidence: `vanished` says, for each, whether it vanished while the asking node's
own lock was held all along, and `release_runs_of` acts only on that, and only while
the asker's own lock is still held. Correctness never depends on it; it only lets a
dead node's runs be taken over sooner (their leases are ended at once).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.model import NodeIdentity
from scheduler.store.connection import in_list, pairs_in
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
    since = f"CASE WHEN CAST(:key AS INTEGER) IS NULL THEN NULL ELSE {now} END"
    statement = f"""
        INSERT INTO {NODES} (id, name, host, pid, version, started_at, heartbeat_at,
                             stopped_at, jobs_digest, liveness_key, liveness_since, process)
        VALUES (:id, :name, :host, :pid, :version, {now}, {now}, NULL, :digest, :key,
                {since}, :process)
        ON CONFLICT (id) DO UPDATE SET started_at = {now}, heartbeat_at = {now},
            stopped_at = NULL, jobs_digest = excluded.jobs_digest,
            liveness_key = excluded.liveness_key, liveness_since = excluded.liveness_since,
            process = excluded.process
    """
    parameters = {
        "id": node.id,
        "name": node.name,
        "host": node.host,
        "pid": node.pid,
        "version": node.version,
        "digest": jobs_digest,
        "key": liveness_key,
        "process": node.process,
    }
    with database.transaction() as connection:
        connection.execute(statement, parameters)


def set_liveness(database: Database, node_id: str, key: int) -> None:
    """The node holds its liveness lock under a new key (after losing the old one), since
    now by the database clock."""
    with database.transaction() as connection:
        connection.execute(
            f"UPDATE {NODES} SET liveness_key = :key, liveness_since = {database.now}"
            " WHERE id = :id",
            {"key": key, "id": node_id},
        )


def heartbeat(database: Database, node_id: str) -> None:
    with database.transaction() as connection:
        connection.execute(
            f"UPDATE {NODES} SET heartbeat_at = {database.now} WHERE id = :id",
            {"id": node_id},
        )


def lock_held(key: str) -> str:
    """SQL: the liveness lock under `key` (an SQL expression) is held in this database by
    its node's session (PostgreSQL only; a watcher's shared lock on it is no holder)."""
    return f"""EXISTS (
    SELECT 1 FROM pg_locks AS lock
    WHERE lock.locktype = 'advisory' AND lock.granted AND lock.objsubid = 2
      AND lock.mode = 'ExclusiveLock'
      AND lock.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND lock.classid = CAST({LIVENESS_NAMESPACE} AS oid)
      AND lock.objid = CAST({key} AS oid))"""


# The node row's liveness lock is held (`node` is the nodes table's alias).
_LOCK_HELD = lock_held("node.liveness_key")
# A running node that bound its liveness to a lock it no longer holds (a watcher's
# shared lock on the same key, see `store.liveness.PeerWatch`, is no holder).
_GONE = f"(node.stopped_at IS NULL AND node.liveness_key IS NOT NULL AND NOT {_LOCK_HELD})"


# The running nodes whose liveness lock went (PostgreSQL; `node` is the nodes table's
# alias): their runs are in doubt. Not a verdict of death (see `vanished`), but no body
# of theirs makes a later period skip (`store.claims`).
DOUBTFUL_HOLDERS = f"SELECT node.id FROM {NODES} AS node WHERE {_GONE}"


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


def gone_query(database: Database) -> str:
    """The nodes whose liveness lock has disappeared (for the heartbeat's read: a hint
    to look, never a verdict). PostgreSQL only: its clock is in the SQL."""
    recent = f"node.heartbeat_at >= {database.now_plus(str(-GONE_LOOKBACK_S))}"
    return f"SELECT node.id FROM {NODES} AS node WHERE {_GONE} AND {recent} ORDER BY node.id"


@dataclass(frozen=True)
class Vanished:
    """Another node's liveness lock, named by its row, that is not held now.

    `after_mine`: the lock was taken after the asking node's own, which is still held:
    it was held, and then went, while the asker's own session lived throughout.
    """

    id: str
    key: int
    after_mine: bool


def vanished(database: Database, own_id: str, own_key: int | None) -> list[Vanished]:
    """Other nodes whose liveness lock is gone (PostgreSQL; elsewhere nothing is known
    before a lease runs out). `own_key`: the lock this node holds now, if any."""
    if not database.sessions:
        return []
    recent = f"node.heartbeat_at >= {database.now_plus(str(-GONE_LOOKBACK_S))}"
    statement = f"""
        SELECT node.id, node.liveness_key AS key,
               (CAST(:own_key AS INTEGER) IS NOT NULL AND {lock_held(":own_key")}
                AND node.liveness_since > (SELECT own.liveness_since FROM {NODES} AS own
                                           WHERE own.id = :own_id
                                             AND own.liveness_key = :own_key))
                   AS after_mine
        FROM {NODES} AS node
        WHERE {_GONE} AND {recent} AND node.id <> :own_id
        ORDER BY node.id
    """
    with database.transaction() as connection:
        rows = connection.execute(statement, {"own_id": own_id, "own_key": own_key})
        return [Vanished(row.id, row.key, bool(row.after_mine)) for row in rows]


def watchable_query(database: Database, alive_within: float) -> str:
    """The ring: running nodes (any jobs) that hold their liveness lock, in id order, in
    which each node watches the next for its lock to go, read in one scan of `pg_locks`
    as one text array of `id` and `key` pairs (PostgreSQL only; see `parse_ring`)."""
    since = database.now_plus(f"{-float(alive_within)!r}")
    return f"""
        SELECT node.id || ' ' || node.liveness_key FROM {NODES} AS node
        WHERE node.stopped_at IS NULL AND node.liveness_key IS NOT NULL
          AND node.heartbeat_at >= {since} AND {_LOCK_HELD}
        ORDER BY node.id
    """


def parse_ring(entries: Sequence[str] | None) -> list[Watched]:
    """The ring from `watchable_query`'s entries; an entry that does not parse is left
    out (a node id holds no space, the key is an integer), never raised."""
    ring: list[Watched] = []
    for entry in entries or ():
        node, _, key = str(entry).rpartition(" ")
        if node and key.lstrip("-").isdigit():
            ring.append(Watched(node, int(key)))
    return ring


def own_lock_query() -> str:
    """Whether this node's own liveness lock, as its row names it, is held; with the key.
    Parameter: `own_id`. One text: the key and `t` or `f` (see `parse_own_lock`)."""
    return (
        f"SELECT node.liveness_key || ' ' || CASE WHEN {_LOCK_HELD} THEN 't' ELSE 'f' END"
        f" FROM {NODES} AS node WHERE node.id = :own_id"
    )


def parse_own_lock(entry: str | None) -> tuple[int | None, bool]:
    """The key the node's row names and whether it is held, from `own_lock_query`."""
    key, _, held = str(entry or "").partition(" ")
    if not key.lstrip("-").isdigit():
        return None, False
    return int(key), held == "t"


def release_runs_of(database: Database, dead: Collection[Watched], own_key: int) -> int:
    """End the leases of every run these nodes hold, if each row still names the lock
    judged gone and it is still not held, and if the asking node's own lock (`own_key`)
    is still held: the recovery loop takes the runs over at once (not a queued one,
    whose message a worker may still pick up before its deadline). Returns how many."""
    if not dead or not database.sessions:
        return 0
    pairs, parameters = pairs_in(
        "dead", [(node.id, node.key) for node in sorted(dead, key=lambda n: (n.id, n.key))]
    )
    now = database.now
    # A queued run needs its sender no more: its message may still be picked up.
    doomed = f"""holder IN (SELECT node.id FROM {NODES} AS node
                         WHERE (node.id, node.liveness_key) IN ({pairs}) AND {_GONE})
          AND {lock_held(":own_key")}
          AND live AND lease_expires_at > {now} AND status <> 'queued'"""
    # Locked in id order, as every batch write of runs is (`store.writes`): no deadlock
    # with a holder's renewal should the judgement of death race its last beat.
    statement = f"""
        UPDATE {RUNS} SET lease_expires_at = {now}
        FROM (SELECT id AS locked_id FROM {RUNS} WHERE {doomed} ORDER BY id FOR UPDATE)
             AS locked
        WHERE id = locked.locked_id AND {doomed}
    """
    with database.transaction() as connection:
        released = connection.execute(statement, {**parameters, "own_key": own_key}).rowcount
        if released:
            notify_on(database, connection, Wake.RECOVERY)
        return released


@dataclass(frozen=True)
class Incarnation:
    """An earlier node with this node's name and host that never said it stopped."""

    id: str
    pid: int
    # Its process identity as it registered it (see `scheduler.identity`); None if unknown.
    process: str | None
    liveness_key: int | None
    lock_held: bool


def earlier_incarnations(database: Database, node: NodeIdentity) -> list[Incarnation]:
    """Rows of this node's name on this host, other than its own, still not stopped."""
    held = _LOCK_HELD if database.sessions else "FALSE"
    statement = f"""
        SELECT node.id, node.pid, node.process, node.liveness_key, {held} AS held
        FROM {NODES} AS node
        WHERE node.name = :name AND node.host = :host AND node.id <> :id
          AND node.stopped_at IS NULL
    """
    parameters = {"name": node.name, "host": node.host, "id": node.id}
    with database.transaction() as connection:
        return [
            Incarnation(row.id, row.pid, row.process, row.liveness_key, bool(row.held))
            for row in connection.execute(statement, parameters)
        ]


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
