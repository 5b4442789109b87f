"""A node schedules by the database clock, read with each heartbeat and whenever the
database says a claim came early. Such a reading may wait before its statement (a row
lock in the beat, a pool with every connection in use) or after it (the beat's commit):
it must be placed at the statement that made it, not in the middle of the whole call,
or the node's clock runs ahead or behind by half the wait. And a statement's own round
trip may be slow (its reply held up on the way back): a reading that uncertain must not
replace a tighter one that it agrees with."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
import structlog

from scheduler.model import NodeIdentity
from scheduler.node.clock import Clock
from scheduler.node.heartbeat import Heartbeat
from scheduler.node.peers import Peers
from scheduler.run.dispatcher import Dispatcher
from scheduler.store import nodes
from scheduler.store.database import Database, open_database
from tests.acceptance.tcp_proxy import Proxy

pytestmark = pytest.mark.postgres
NODE = NodeIdentity(id="beating-000000", name="beating", host="host", pid=1, version="0")
# How long the reading is kept waiting before its statement.
HELD_S = 1.0
# What the reading may be off by: round trips on this machine, far below HELD_S / 2.
SLACK_S = 0.1


@contextmanager
def _heartbeat(database: Database, clock: Clock) -> Iterator[Heartbeat]:
    log = structlog.get_logger()
    dispatcher = Dispatcher(database, {}, NODE.id, 1, log)
    try:
        yield Heartbeat(
            database=database,
            dispatcher=dispatcher,
            node_id=NODE.id,
            interval=10.0,
            log=log,
            clock=clock,
            peers=Peers(NODE.id),
            halt=threading.Event(),
        )
    finally:
        dispatcher.drain(1)


def _off_by(clock: Clock, database: Database) -> float:
    """Seconds the node's clock is ahead of the database's (negative: behind), or 0.0
    when the database's reading falls between two of the node's."""
    before = clock.now()
    database_now = database.read_clock()
    after = clock.now()
    if database_now < before:
        return (before - database_now).total_seconds()
    if database_now > after:
        return -(database_now - after).total_seconds()
    return 0.0


def test_a_beat_that_waits_for_a_lock_reads_the_clock_where_its_statement_ran(
    postgres_url: str,
) -> None:
    database, clock = open_database(postgres_url), Clock()
    try:
        nodes.register(database, NODE, "digest")
        with _heartbeat(database, clock) as heartbeat:
            with psycopg.connect(postgres_url) as holder:
                holder.execute("SELECT 1 FROM scheduler_nodes WHERE id = %s FOR UPDATE", (NODE.id,))
                release = threading.Timer(HELD_S, holder.commit)
                release.start()
                heartbeat.beat()
                release.join()
            assert heartbeat.last_beat is not None, "the beat did not land"
        off_by = _off_by(clock, database)
    finally:
        database.dispose()
    assert abs(off_by) <= SLACK_S, f"the node's clock is off by {off_by:+.3f} s"


def test_a_reading_that_waits_for_a_connection_is_placed_where_its_statement_ran(
    postgres_url: str,
) -> None:
    database, clock = open_database(postgres_url, connections=1), Clock()
    taken, done = threading.Event(), threading.Event()

    def hold_the_only_connection() -> None:
        with database.autocommit():
            taken.set()
            done.wait(HELD_S)

    holder = threading.Thread(target=hold_the_only_connection)
    try:
        with _heartbeat(database, clock) as heartbeat:
            holder.start()
            assert taken.wait(10)
            started = time.monotonic()
            heartbeat.calibrate()
            assert time.monotonic() - started >= HELD_S / 2, "the reading did not wait"
        holder.join()
        off_by = _off_by(clock, database)
    finally:
        done.set()
        database.dispose()
    assert abs(off_by) <= SLACK_S, f"the node's clock is off by {off_by:+.3f} s"


def test_a_reading_whose_reply_comes_late_does_not_set_the_clock_back(
    postgres_url: str,
) -> None:
    """The beat's read reaches the server, which reads its clock at once, but the reply
    is held up on the way back (a partition of a second, through a real proxy). Placed
    in the middle of that round trip, the reading would put the node's clock half of
    it behind, and the node would claim every period that much late until the next
    beat; the beat before it had a round trip of a millisecond, and still holds."""
    proxy = Proxy(target_port=5432)
    proxy.start()
    database, clock = open_database(proxy.url(postgres_url)), Clock()
    try:
        nodes.register(database, NODE, "digest")
        with _heartbeat(database, clock) as heartbeat:
            heartbeat.beat()
            assert abs(_off_by(clock, database)) <= SLACK_S, "the first beat set the clock"
            held_up = proxy.freeze_after(b"AS requests_waiting")

            def release_the_reply() -> None:
                if held_up.wait(10):
                    time.sleep(HELD_S)
                proxy.thaw()

            release = threading.Thread(target=release_the_reply)
            release.start()
            started = time.monotonic()
            heartbeat.beat()
            release.join()
            assert held_up.is_set(), "the beat's read was not held up"
            assert time.monotonic() - started >= HELD_S, "the beat did not wait for its reply"
            off_by = _off_by(clock, database)
    finally:
        proxy.thaw()
        database.dispose()
        proxy.cut()
    assert abs(off_by) <= SLACK_S, f"the node's clock is off by {off_by:+.3f} s"
