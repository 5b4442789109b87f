"""The nodes table: who is alive, since when, and on which version."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import update

from scheduler.store.database import Database
from scheduler.store.schema import nodes


@dataclass(frozen=True)
class NodeIdentity:
    id: str
    name: str
    host: str
    pid: int
    version: str


def register(database: Database, node: NodeIdentity) -> None:
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
        )
        .on_conflict_do_update(
            index_elements=["id"],
            set_={"started_at": now, "heartbeat_at": now, "stopped_at": None},
        )
    )
    with database.transaction() as connection:
        connection.execute(statement)


def heartbeat(database: Database, node_id: str) -> None:
    with database.transaction() as connection:
        connection.execute(
            update(nodes).where(nodes.c.id == node_id).values(heartbeat_at=database.now())
        )


def mark_stopped(database: Database, node_id: str) -> None:
    with database.transaction() as connection:
        connection.execute(
            update(nodes).where(nodes.c.id == node_id).values(stopped_at=database.now())
        )
