"""The nodes table: who is alive, since when, and on which version."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select, update

from scheduler.store.database import Database
from scheduler.store.schema import nodes


@dataclass(frozen=True)
class NodeIdentity:
    id: str
    name: str
    host: str
    pid: int
    version: str


def register(database: Database, node: NodeIdentity, jobs_digest: str) -> None:
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
        )
        .on_conflict_do_update(
            index_elements=["id"],
            set_={
                "started_at": now,
                "heartbeat_at": now,
                "stopped_at": None,
                "jobs_digest": jobs_digest,
            },
        )
    )
    with database.transaction() as connection:
        connection.execute(statement)


def heartbeat(database: Database, node_id: str) -> None:
    with database.transaction() as connection:
        connection.execute(
            update(nodes).where(nodes.c.id == node_id).values(heartbeat_at=database.now())
        )


def peers(database: Database, node_id: str, alive_within: float) -> list[str]:
    """Ids of the running nodes (this one included) that run the same jobs as this one
    and sent a heartbeat within `alive_within` seconds, in id order."""
    digest = select(nodes.c.jobs_digest).where(nodes.c.id == node_id).scalar_subquery()
    statement = (
        select(nodes.c.id)
        .where(
            nodes.c.jobs_digest == digest,
            nodes.c.stopped_at.is_(None),
            nodes.c.heartbeat_at >= database.now_plus(-alive_within),
        )
        .order_by(nodes.c.id)
    )
    with database.transaction() as connection:
        return list(connection.execute(statement).scalars())


def mark_stopped(database: Database, node_id: str) -> None:
    with database.transaction() as connection:
        connection.execute(
            update(nodes).where(nodes.c.id == node_id).values(stopped_at=database.now())
        )
