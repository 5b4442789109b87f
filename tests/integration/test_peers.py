"""What the share-out reads from a real database: live peers with the same jobs, which
periods of another node's share are still unclaimed, and the claims a peer hears of."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from scheduler.model import Due, NodeIdentity
from scheduler.node.wakeups import ClaimsHeard
from scheduler.store import claims, nodes, periods
from scheduler.store.database import Database, open_database
from scheduler.store.wakeups import CHANNEL, CLAIMED_AT_MOST, Wake, parse
from tests.sql import update

PERIOD = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _node(name: str) -> NodeIdentity:
    return NodeIdentity(id=f"{name}-000000", name=name, host="host", pid=1, version="0")


def test_peers_are_the_live_nodes_with_the_same_jobs(database: Database) -> None:
    for name, digest in [("a", "same"), ("b", "same"), ("c", "same"), ("d", "other")]:
        nodes.register(database, _node(name), digest)
    nodes.mark_stopped(database, "c-000000")
    assert nodes.peers(database, "a-000000", alive_within=30) == ["a-000000", "b-000000"]
    assert nodes.peers(database, "d-000000", alive_within=30) == ["d-000000"]

    silent = datetime.now(UTC) - timedelta(seconds=60)
    with database.transaction() as connection:
        update(connection, "scheduler_nodes", {"id": "b-000000"}, heartbeat_at=silent)
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


def _notifications(listener: psycopg.Connection[Any]) -> list[str]:
    return [notice.payload for notice in listener.notifies(timeout=1.0)]


def test_a_claim_tells_the_peers_which_periods_it_claimed(postgres_url: str) -> None:
    """So that the peers whose share they were not need not read whether they were: a
    node that heard them knows; a batch too large to say says nothing (they read)."""
    database = open_database(postgres_url)
    try:
        with psycopg.connect(postgres_url, autocommit=True) as listener:
            listener.execute(f"LISTEN {CHANNEL}")
            claims.claim(database, [Due("job-a", PERIOD, 30), Due("job-b", PERIOD, 30)], "n-a")
            payloads = _notifications(listener)
            heard = ClaimsHeard()
            for payload in payloads:
                parsed = parse(payload)
                if parsed is not None and parsed.kind is Wake.CLAIMED:
                    heard.add(parsed.tokens)
            assert heard.heard("job-a", PERIOD)
            assert heard.heard("job-b", PERIOD)
            assert not heard.heard("job-a", PERIOD + timedelta(seconds=1))
            assert not heard.heard("job-c", PERIOD)
            looked = [Due(name, PERIOD, 30) for name in ("job-a", "job-c", "job-b")]
            assert heard.unheard(looked) == [looked[1]]
            assert ClaimsHeard().unheard(looked) == looked  # nothing heard: all are read

            many = [Due(f"bulk-{n}", PERIOD, 30) for n in range(CLAIMED_AT_MOST + 1)]
            assert len(claims.claim(database, many, "n-a").won) == len(many)
            said = [parse(payload) for payload in _notifications(listener)]
            assert [heard for heard in said if heard and heard.kind is Wake.CLAIMED] == []
    finally:
        database.dispose()
