"""SIGTERM drains: running jobs finish within the grace period, or are recorded abandoned."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from scheduler.states import Reason, RunStatus
from tests.acceptance.processes import Node, other_threads, signal_thread, start_node
from tests.acceptance.records import run_rows, table_counts

pytestmark = pytest.mark.slow


def test_sigterm_lets_the_running_job_finish(tmp_path: Path, database_url: str) -> None:
    node = start_node(
        tmp_path,
        "draining",
        database_url,
        "sleeper",
        ["--grace", "10s"],
        EXECUTION_LOG=str(tmp_path / "done.txt"),
        SLEEP_SECONDS="2",
    )
    started = node.wait_for(lambda event: event.get("event") == "run_started")
    node.signal(signal.SIGTERM)
    began = time.monotonic()
    assert node.process.wait(timeout=15) == 0
    assert time.monotonic() - began < 5
    events = [event["event"] for event in node.events()]
    stopping = events.index("node_stopping")
    assert stopping < events.index("run_succeeded") < events.index("node_stopped")
    assert "run_claimed" not in events[stopping:], "a period was claimed after the signal"
    rows = run_rows(database_url, "sleeper")
    (row,) = [row for row in rows if row["id"] == started["run_id"]]
    assert row["status"] == RunStatus.SUCCEEDED
    ran = [row for row in rows if row["status"] != RunStatus.SKIPPED]
    assert {row["status"] for row in ran} == {RunStatus.SUCCEEDED}
    assert (tmp_path / "done.txt").read_text().count("done") == len(ran)
    assert table_counts(database_url)["scheduler_nodes"] == 1


def test_a_job_past_the_grace_period_is_recorded_abandoned(
    tmp_path: Path, database_url: str
) -> None:
    node = start_node(
        tmp_path,
        "impatient",
        database_url,
        "sleeper",
        ["--grace", "1s"],
        EXECUTION_LOG=str(tmp_path / "done.txt"),
        SLEEP_SECONDS="60",
    )
    started = node.wait_for(lambda event: event.get("event") == "run_started")
    node.signal(signal.SIGTERM)
    assert node.process.wait(timeout=15) == 0
    (row,) = [row for row in run_rows(database_url, "sleeper") if row["id"] == started["run_id"]]
    assert row["status"] == RunStatus.ABANDONED
    assert row["reason"] == Reason.SHUTDOWN
    assert not (tmp_path / "done.txt").exists()


def _to_the_process(node: Node, _which: int) -> None:
    node.signal(signal.SIGTERM)


def _to_another_thread(node: Node, which: int) -> None:
    """To one of the node's threads but its main one (the first, or the last)."""
    signal_thread(node.process.pid, other_threads(node.process.pid)[which], signal.SIGTERM)


@pytest.mark.parametrize("send", [_to_the_process, _to_another_thread])
def test_a_second_signal_exits_at_once(
    tmp_path: Path, sqlite_url: str, send: Callable[[Node, int], None]
) -> None:
    """Also when the kernel gives either signal to another thread than the main one,
    which waits for the running job while the node drains."""
    node = start_node(
        tmp_path,
        "hasty",
        sqlite_url,
        "sleeper",
        ["--grace", "60s"],
        EXECUTION_LOG=str(tmp_path / "done.txt"),
        SLEEP_SECONDS="60",
    )
    try:
        node.wait_for(lambda event: event.get("event") == "run_started")
        send(node, 0)
        node.wait_for(lambda event: event.get("event") == "node_stopping", timeout=10)
        began = time.monotonic()
        send(node, -1)
        assert node.process.wait(timeout=15) == 128 + signal.SIGTERM
        assert time.monotonic() - began < 3
    finally:
        node.kill()


def test_a_signal_another_thread_took_still_stops_the_node(tmp_path: Path, sqlite_url: str) -> None:
    """The kernel hands a process's SIGTERM (a rolling deploy's, a `kill`) to any of its
    threads that does not block it, and Python runs the handler only in the main thread,
    which an idle node keeps asleep until its next period: a node of daily jobs ignored
    the signal until midnight. Here the signal goes to one of the node's other threads:
    the node stops all the same, at once."""
    node = start_node(tmp_path, "elsewhere", sqlite_url, "daily")
    node.wait_for(lambda event: event.get("event") == "node_started")
    time.sleep(0.5)  # its main thread asleep until midnight
    pid = node.process.pid
    try:
        signal_thread(pid, other_threads(pid)[0], signal.SIGTERM)
        began = time.monotonic()
        assert node.process.wait(timeout=15) == 0
        assert time.monotonic() - began < 5
    finally:
        node.kill()
    events = [event["event"] for event in node.events()]
    assert events[-3:] == ["signal_received", "node_stopping", "node_stopped"]
