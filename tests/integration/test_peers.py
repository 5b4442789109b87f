"""What the share-out reads from a real database: live peers with the same jobs, and
which periods of another node's share are still unclaimed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import update

from scheduler.model import Due, NodeIdentity
from scheduler.store import claims, nodes, periods
from scheduler.store.database import Database
from scheduler.store.schema import nodes as nodes_table

PERIOD = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _node(name: str) -> NodeIdentity:
    return NodeIdentity(id=f"{name}-000000", name=name, host="host", pid=1, version="0")


def test_peers_are_the_live_nodes_with_the_same_jobs(database: Database) -> None:
    for name, digest in [("a", "same"), ("b", "same"), ("c", "same"), ("d", "other")]:
        nodes.register(database, _node(name), digest)
    nodes.mark_stopped(database, "c-000000")
    assert nodes.peers(database, "a-000000", alive_within=30) == ["a-000000", "b-000000"]
    assert nodes.peers(database, "d-000000", alive_within=30) == ["d-000000"]

    with database.transaction() as connection:
        connection.execute(
            update(nodes_table)
            .where(nodes_table.c.id == "b-000000")
            .values(heartbeat_at=datetime.now(UTC) - timedelta(seconds=60))
        )
    assert nodes.peers(database, "a-000000", alive_within=30) == ["a-000000"]
    nodes.heartbeat(database, "b-000000")
    assert nodes.peers(database, "a-000000", alive_within=30) == ["a-000000", "b-000000"]


def test_unclaimed_lists_the_periods_without_a_row_in_order(database: Database) -> None:
    due = [
        Due(f"job-{index:04d}", PERIOD + timedelta(seconds=index % 3), 30) for index in range(2500)
    ]
    taken = due[1::2]
    assert len(claims.claim(database, taken, "node-b").won) == len(taken)
    assert periods.unclaimed(database, due) == due[0::2]
    assert periods.unclaimed(database, []) == []
    assert periods.unclaimed(database, taken) == []
