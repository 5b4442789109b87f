"""Console requests whose taker met a fault or died before finishing them (real `scheduler
run` processes, a real PostgreSQL, SIGKILL): the request is given back or its hold lapses,
another take carries it out, and the job runs once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from scheduler.model import lock_key
from scheduler.store import requests as asked
from scheduler.store.database import open_database
from scheduler.store.requests import Draft, RequestKind, RequestRow
from tests.acceptance.processes import Node, start_node
from tests.waiting import wait_until

pytestmark = pytest.mark.slow
JOB = "on-demand"


@contextmanager
def job_locked(database_url: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """Hold the job's advisory lock (the one every claim of it takes) from a session of
    the test's own: a claim of the job waits, then meets its lock timeout."""
    with psycopg.connect(database_url, autocommit=True) as session:
        session.execute("SELECT pg_advisory_lock(%s)", (lock_key(JOB),))
        try:
            yield session
        finally:
            session.execute("SELECT pg_advisory_unlock(%s)", (lock_key(JOB),))


def waiting_on_the_lock(session: psycopg.Connection[tuple[object, ...]]) -> bool:
    """Whether another session waits for an advisory lock (a node's claim of the job)."""
    found = session.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    ).fetchone()
    return found is not None and int(str(found[0])) > 0


def request(database_url: str, request_id: str) -> RequestRow:
    database = open_database(database_url)
    try:
        row = asked.get(database, request_id)
    finally:
        database.dispose()
    assert row is not None
    return row


def done(database_url: str, request_id: str, timeout: float) -> RequestRow:
    """The request once its outcome is written; a failure shows where it stands."""
    deadline = time.monotonic() + timeout
    row = request(database_url, request_id)
    while row.outcome is None and time.monotonic() < deadline:
        time.sleep(0.1)
        row = request(database_url, request_id)
    assert row.outcome is not None, f"not done within {timeout} s: {row}"
    return row


def trigger(database_url: str) -> str:
    database = open_database(database_url)
    try:
        return asked.add(database, Draft(JOB, RequestKind.TRIGGER, "alice"))
    finally:
        database.dispose()


def node(tmp_path: Path, name: str, database_url: str) -> Node:
    started = start_node(
        tmp_path, name, database_url, "requested", EXECUTION_LOG=str(tmp_path / "runs.log")
    )
    started.wait_for(lambda event: event.get("event") == "node_started")
    return started


def runs(tmp_path: Path) -> list[str]:
    path = tmp_path / "runs.log"
    return path.read_text().splitlines() if path.exists() else []


def test_a_request_whose_claim_met_a_lock_timeout_is_carried_out_later(
    tmp_path: Path, postgres_url: str
) -> None:
    """The claim waits for the job's lock past its lock timeout (2 s): the node gives the
    request back instead of leaving it taken, and carries it out once the lock is free."""
    one = node(tmp_path, "one", postgres_url)
    try:
        with job_locked(postgres_url) as session:
            request_id = trigger(postgres_url)
            wait_until(lambda: waiting_on_the_lock(session), timeout=15)
            time.sleep(3)  # past the lock timeout: the claim failed
            assert request(postgres_url, request_id).outcome is None
        assert done(postgres_url, request_id, 30).outcome == "done"
        wait_until(lambda: len(runs(tmp_path)) == 1, timeout=15)
        time.sleep(2)  # a second run would show by now
    finally:
        assert one.stop() == 0
    assert len(runs(tmp_path)) == 1, runs(tmp_path)
    events = [event["event"] for event in one.events()]
    assert "request_given_back" in events


def test_a_request_whose_taker_was_killed_is_taken_again_by_another_node(
    tmp_path: Path, postgres_url: str
) -> None:
    """SIGKILL while the taker's claim waits for the job's lock: the request's hold lapses
    and another node takes it again and carries it out; the job runs once."""
    one = node(tmp_path, "one", postgres_url)
    two: Node | None = None
    try:
        with job_locked(postgres_url) as session:
            request_id = trigger(postgres_url)
            wait_until(lambda: waiting_on_the_lock(session), timeout=15)
            taker = request(postgres_url, request_id).taken_by
            assert taker is not None
            one.kill()
            killed_at = time.monotonic()
            two = node(tmp_path, "two", postgres_url)
        assert done(postgres_url, request_id, 45).outcome == "done"
        retaken_after = time.monotonic() - killed_at
        wait_until(lambda: len(runs(tmp_path)) == 1, timeout=15)
        time.sleep(2)  # a second run would show by now
    finally:
        one.kill()
        if two is not None:
            assert two.stop() == 0
    row = request(postgres_url, request_id)
    assert row.taken_by not in (None, taker)
    assert len(runs(tmp_path)) == 1, runs(tmp_path)
    assert retaken_after < 30, retaken_after
