"""A rolling deploy: SIGTERM reaches a node while its jobs run. The draining node keeps
its leases until its runs end, so no other node runs them a second time, and a job in a
child process never outlives the node that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from scheduler.states import Reason, RunStatus
from tests.acceptance.processes import SCHEDULER, Node, environment, jobmods, start_node
from tests.acceptance.records import process_alive, run_rows

pytestmark = pytest.mark.slow
# The `long` job: lease 3 s, so a lease left unrenewed expires well inside the grace.
RUN_SECONDS = 8


def _steps(log: Path, period: str) -> list[tuple[int, str]]:
    """(attempt, start|done) for one period of the `long` job, from the job's own log."""
    lines = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    return [(int(words[2]), words[3]) for words in lines if words[0] == period]


def _first_start(nodes: list[Node]) -> tuple[Node, dict[str, object]]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for node in nodes:
            for event in node.events():
                if event.get("event") == "run_started":
                    return node, event
        time.sleep(0.05)
    raise AssertionError("no node started a run")


def test_a_draining_node_keeps_its_leases_until_its_runs_end(
    tmp_path: Path, postgres_url: str
) -> None:
    log = tmp_path / "executions.txt"
    nodes = [
        start_node(
            tmp_path,
            f"node{n}",
            postgres_url,
            "long",
            ["--grace", "20s"],
            EXECUTION_LOG=str(log),
            LONG_SECONDS=str(RUN_SECONDS),
        )
        for n in range(2)
    ]
    holder, started = _first_start(nodes)
    (other,) = [node for node in nodes if node is not holder]
    try:
        holder.signal(signal.SIGTERM)
        assert holder.process.wait(timeout=RUN_SECONDS + 10) == 0
    finally:
        holder.kill()
        assert other.stop() == 0
    period = str(started["period"])
    assert _steps(log, period) == [(1, "start"), (1, "done")], "the period ran twice"
    assert not [
        event
        for event in other.events()
        if event.get("event") == "run_retaken" and event.get("run_id") == started["run_id"]
    ]
    (row,) = [row for row in run_rows(postgres_url, "long") if row["id"] == started["run_id"]]
    assert (row["status"], row["attempt"]) == (RunStatus.SUCCEEDED, 1)


def test_run_once_keeps_its_lease_while_it_drains(tmp_path: Path, postgres_url: str) -> None:
    log = tmp_path / "executions.txt"
    with (tmp_path / "run-once.log").open("wb") as out:
        once = subprocess.Popen(
            [
                SCHEDULER,
                "run-once",
                "long",
                "--database-url",
                postgres_url,
                "--jobs",
                jobmods("long"),
                "--log-format",
                "json",
                "--grace",
                "20s",
            ],
            cwd=tmp_path,
            env=environment(EXECUTION_LOG=str(log), LONG_SECONDS=str(RUN_SECONDS)),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    foreground = Node("run-once", once, tmp_path / "run-once.log")
    daemon: Node | None = None
    try:
        started = foreground.wait_for(lambda event: event.get("event") == "run_started")
        # A daemon that knows the job and would take the period over once its lease
        # expired. Started once run-once holds the period: started together, the daemon
        # sometimes claimed it first, and run-once had nothing to drain.
        daemon = start_node(
            tmp_path, "daemon", postgres_url, "long", EXECUTION_LOG=str(log), LONG_SECONDS="0.1"
        )
        daemon.wait_for(lambda event: event.get("event") == "node_started")
        once.send_signal(signal.SIGTERM)
        once.wait(timeout=RUN_SECONDS + 10)
    finally:
        foreground.kill()
        assert daemon is None or daemon.stop() == 0
    period = str(started["period"])
    assert _steps(log, period) == [(1, "start"), (1, "done")], "the period ran twice"
    (row,) = [row for row in run_rows(postgres_url, "long") if row["id"] == started["run_id"]]
    assert (row["status"], row["attempt"]) == (RunStatus.SUCCEEDED, 1)


def _child_pid(log: Path, timeout: float = 20) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = log.read_text().splitlines() if log.exists() else []
        if lines:
            return int(lines[0].split()[1])
        time.sleep(0.05)
    raise AssertionError("the child never wrote a line")


def _assert_gone_with_its_node(log: Path, pid: int, node_gone_at: float) -> None:
    deadline = time.monotonic() + 1.0
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not process_alive(pid), "the child process outlived its node"
    last = max(float(line.split()[2]) for line in log.read_text().splitlines())
    assert last <= node_gone_at + 0.2, f"the child wrote {last - node_gone_at:.2f}s after exit"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_child_process_never_outlives_its_node(
    tmp_path: Path, sqlite_url: str, signum: signal.Signals
) -> None:
    log = tmp_path / "executions.txt"
    node = start_node(
        tmp_path, "parent", sqlite_url, "lifeline", ["--grace", "1s"], EXECUTION_LOG=str(log)
    )
    try:
        pid = _child_pid(log)
        node.signal(signum)
        node.process.wait(timeout=15)
        gone_at = time.time()
        _assert_gone_with_its_node(log, pid, gone_at)
    finally:
        node.kill()
        for line in log.read_text().splitlines() if log.exists() else []:
            child = int(line.split()[1])
            if process_alive(child):
                os.kill(child, signal.SIGKILL)
    if signum is signal.SIGTERM:
        statuses = Counter(
            (row["status"], row["reason"]) for row in run_rows(sqlite_url, "child-worker")
        )
        assert statuses[(RunStatus.ABANDONED, Reason.SHUTDOWN)] == 1
