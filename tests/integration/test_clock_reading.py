"""A node schedules by the database clock, read with each heartbeat. The beat is one
transaction of several statements, and any of them may wait (a row lock, a busy pool, a
slow commit): the reading must be placed at the statement that made it, not in the
middle of the whole beat, or the node's clock runs ahead or behind by half the wait."""

from __future__ import annotations

import threading
from datetime import timedelta

import psycopg
import pytest
import structlog

from scheduler.model import NodeIdentity
from scheduler.node.clock import Clock
from scheduler.node.heartbeat import Heartbeat
from scheduler.node.peers import Peers
from scheduler.run.dispatcher import Dispatcher
from scheduler.store import nodes
from scheduler.store.database import open_database

pytestmark = pytest.mark.postgres
NODE = NodeIdentity(id="beating-000000", name="beating", host="host", pid=1, version="0")
# How long another session holds the node's row, so that the beat's first statement waits.
HELD_S = 1.0
# What the reading may be off by: round trips on this machine, far below HELD_S / 2.
SLACK = timedelta(seconds=0.1)


def test_a_beat_that_waits_for_a_lock_still_reads_the_clock_where_it_read_it(
    postgres_url: str,
) -> None:
    database = open_database(postgres_url)
    log = structlog.get_logger()
    clock = Clock()
    dispatcher = Dispatcher(database, {}, NODE.id, 1, log)
    heartbeat = Heartbeat(
        database=database,
        dispatcher=dispatcher,
        node_id=NODE.id,
        interval=10.0,
        log=log,
        clock=clock,
        peers=Peers(NODE.id),
        halt=threading.Event(),
    )
    try:
        nodes.register(database, NODE, "digest")
        with psycopg.connect(postgres_url) as holder:
            holder.execute("SELECT 1 FROM scheduler_nodes WHERE id = %s FOR UPDATE", (NODE.id,))
            release = threading.Timer(HELD_S, holder.commit)
            release.start()
            heartbeat.beat()
            release.join()
        assert heartbeat.last_beat is not None, "the beat did not land"
        before = clock.now()
        database_now = database.read_clock()
        after = clock.now()
    finally:
        dispatcher.drain(1)
        database.dispose()
    assert before - SLACK <= database_now <= after + SLACK, (
        f"the node's clock is off by {(before - database_now).total_seconds():+.3f} s"
    )
