"""Wake-ups instead of polling: a node on PostgreSQL sleeps until another writer tells it
(NOTIFY) or its heartbeat reads a deadline; on SQLite it polls and says so."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import psycopg
import pytest

from tests.acceptance.processes import Node, start_node

pytestmark = [pytest.mark.slow]


def _wakeups(node: Node) -> dict[str, object]:
    return node.wait_for(lambda event: event.get("event") == "wakeups")


def _retaken(node: Node, run_id: str, timeout: float) -> dict[str, object]:
    return node.wait_for(
        lambda e: e.get("event") == "run_retaken" and e.get("run_id") == run_id,
        timeout=timeout,
    )


def _when(event: dict[str, object]) -> float:
    return datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()


def _first_failure(node: Node) -> dict[str, object]:
    return node.wait_for(
        lambda e: e.get("event") == "run_failed" and e.get("attempt") == 1, timeout=45
    )


@pytest.mark.postgres
def test_a_retry_wakes_the_recovery_loop_at_once(tmp_path: Path, postgres_url: str) -> None:
    """A failed attempt's outcome notifies as it is written; the recovery loop, asleep
    with nothing due, takes the retry a second later: well before the next heartbeat
    (every 10 s with this lease) could have told it, let alone its sweep (300 s). Its
    sessions are its own, so it prepares what it sends again and again."""
    log = str(tmp_path / "x")
    node = start_node(tmp_path, "sleeper", postgres_url, "woken_soon", EXECUTION_LOG=log)
    try:
        assert _wakeups(node)["mode"] == "events"
        liveness = node.wait_for(lambda event: event.get("event") == "liveness_mode")
        assert (liveness["mode"], liveness["prepared_statements"]) == ("session", True)
        failed = _first_failure(node)
        retaken = _retaken(node, str(failed["run_id"]), timeout=20)
        assert _when(retaken) - _when(failed) < 4, "the retry waited for a heartbeat"
    finally:
        assert node.stop() == 0


@pytest.mark.postgres
def test_a_change_no_one_announced_is_found_by_the_next_heartbeat(
    tmp_path: Path, postgres_url: str
) -> None:
    """A retry made due behind every node's back (an UPDATE that notifies no one) is
    taken all the same: each heartbeat reads the next deadline anywhere (every 2 s
    here, from the job's 6 s lease)."""
    log = str(tmp_path / "x")
    node = start_node(tmp_path, "sleeper", postgres_url, "woken_later", EXECUTION_LOG=log)
    try:
        assert _wakeups(node)["mode"] == "events"
        failed = _first_failure(node)
        time.sleep(1)
        with psycopg.connect(postgres_url, autocommit=True) as connection:
            changed = connection.execute(
                "UPDATE scheduler_runs SET retry_at = statement_timestamp() WHERE id = %s",
                (failed["run_id"],),
            ).rowcount
        assert changed == 1
        moved = time.time()
        retaken = _retaken(node, str(failed["run_id"]), timeout=20)
        assert _when(retaken) - moved < 2 * 2 + 1, "not found by the next heartbeat"
    finally:
        assert node.stop() == 0


def test_on_sqlite_a_node_polls_and_says_so(tmp_path: Path, sqlite_url: str) -> None:
    node = start_node(
        tmp_path, "alone", sqlite_url, "woken_soon", EXECUTION_LOG=str(tmp_path / "x")
    )
    try:
        wakeups = _wakeups(node)
        assert wakeups["mode"] == "poll"
        assert "SQLite" in str(wakeups["why"])
    finally:
        assert node.stop() == 0


def _heard(path: Path, kind: str, timeout: float) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            for line in path.read_text().splitlines():
                entry = json.loads(line)
                if entry["kind"] == kind:
                    return dict(entry)
        time.sleep(0.05)
    raise AssertionError(f"no {kind} heard in {timeout}s")


@pytest.mark.postgres
def test_an_alert_event_wakes_the_delivery_at_once(tmp_path: Path, postgres_url: str) -> None:
    """The failed outcome notifies as its event is born: the hook hears it well before
    the next heartbeat (every 10 s with this lease) or the sweep (300 s) could tell."""
    heard = tmp_path / "heard.jsonl"
    node = start_node(tmp_path, "n1", postgres_url, "heard", HEARD_LOG=str(heard))
    try:
        assert _wakeups(node)["mode"] == "events"
        failed = node.wait_for(lambda e: e.get("event") == "run_failed", timeout=30)
        entry = _heard(heard, "failed", timeout=15)
        assert float(str(entry["at"])) - _when(failed) < 3, "the event waited for a beat"
    finally:
        assert node.stop() == 0


@pytest.mark.postgres
def test_an_event_or_stuck_item_no_one_announced_is_found_by_the_next_heartbeat(
    tmp_path: Path, postgres_url: str
) -> None:
    """An event inserted behind the node's back (no notification) and an item left
    claimed by an attempt that is over: each heartbeat (every 2 s with a 6 s lease) reads
    that an event is due and that a stuck item has no event yet."""
    heard = tmp_path / "heard.jsonl"
    node = start_node(tmp_path, "n1", postgres_url, "heard", HEARD_LOG=str(heard), HEARD_LEASE="6s")
    try:
        assert _wakeups(node)["mode"] == "events"
        node.wait_for(lambda e: e.get("event") == "run_succeeded", timeout=30)
        time.sleep(1)
        with psycopg.connect(postgres_url, autocommit=True) as connection:
            connection.execute(
                "INSERT INTO scheduler_events (job, period, kind, subject, detail, created_at,"
                " state, tries, next_try_at)"
                " VALUES ('fails-once', '2026-01-01T00:00:00Z', 'failed', '', 'by hand',"
                " statement_timestamp(), 'pending', 0, statement_timestamp())"
            )
            connection.execute(
                "INSERT INTO scheduler_items (job, key, state, period, run_id, attempt, node,"
                " claimed_at) VALUES ('fails-once', 'invoice-7', 'claimed',"
                " '2026-01-01T00:00:00Z', 'gone', 1, 'gone', statement_timestamp())"
            )
        moved = time.time()
        failed = _heard(heard, "failed", timeout=15)
        # The first `failed` heard may be the real one; the one by hand names its period.
        deadline = time.monotonic() + 15
        while "2026-01-01" not in str(failed["key"]) and time.monotonic() < deadline:
            lines = [json.loads(line) for line in heard.read_text().splitlines()]
            failed = next((e for e in lines if "2026-01-01" in e["key"]), failed)
            time.sleep(0.05)
        stuck = _heard(heard, "stuck_item", timeout=15)
        assert "2026-01-01" in str(failed["key"])
        assert float(str(failed["at"])) - moved < 2 * 2 + 1, "not found by the next heartbeat"
        assert float(str(stuck["at"])) - moved < 2 * 2 + 1, "not found by the next heartbeat"
    finally:
        assert node.stop() == 0
