"""Two containers that share a hostname (host networking, a shared `hostname:`) are
both pid 1 in their own pid namespaces (issue 42, item 1). A node must never take the
other, alive, for its own dead earlier incarnation on a pid alone: here two real nodes
run as pid 1 under `unshare --pid` on one SQLite file, where the lease is all the
liveness there is."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.acceptance.processes import SCHEDULER, Node, environment, jobmods
from tests.acceptance.records import run_rows

pytestmark = pytest.mark.slow


def _in_own_pid_namespace(tmp_path: Path, label: str, url: str, *name: str, **env: str) -> Node:
    """`scheduler run` as pid 1 of a pid namespace of its own (like a container's)."""
    log_path = tmp_path / f"{label}.log"
    command = [
        "unshare",
        "--pid",
        "--fork",
        "--mount-proc",
        "--kill-child=SIGKILL",
        SCHEDULER,
        "run",
        "--database-url",
        url,
        "--jobs",
        jobmods("shared_host"),
        "--log-format",
        "json",
        *name,
    ]
    with log_path.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=tmp_path, env=environment(**env), stdout=out, stderr=subprocess.STDOUT
        )
    return Node(label, process, log_path)


@pytest.mark.parametrize("naming", ["default", "same-name"])
def test_a_node_never_supersedes_a_live_twin_in_another_pid_namespace(
    tmp_path: Path, sqlite_url: str, naming: str
) -> None:
    """The first node runs a 12 s body; its twin starts 2 s into it with the same pid
    (1) on the same host, by default name or by the same `--node-name`. The twin marks
    nothing stopped and retakes nothing: the body runs once, attempt 1, to its end."""
    log = tmp_path / "executions.txt"
    name = ["--node-name", "web"] if naming == "same-name" else []
    first = _in_own_pid_namespace(tmp_path, "first", sqlite_url, *name, EXECUTION_LOG=str(log))
    twin: Node | None = None
    try:
        started = first.wait_for(lambda e: e.get("event") == "run_started", timeout=40)
        assert first.wait_for(lambda e: e.get("event") == "node_started")["pid"] == 1
        time.sleep(2)
        twin = _in_own_pid_namespace(tmp_path, "twin", sqlite_url, *name, EXECUTION_LOG=str(log))
        assert twin.wait_for(lambda e: e.get("event") == "node_started")["pid"] == 1
        first.wait_for(
            lambda e: e.get("event") == "run_succeeded" and e.get("run_id") == started["run_id"],
            timeout=30,
        )
    finally:
        for node in (first, twin):
            if node is not None:
                node.kill()
    events = [e for node in (first, twin) if node is not None for e in node.events()]
    assert [e for e in events if e.get("event") == "node_superseded"] == []
    assert [e for e in events if e.get("event") == "run_retaken"] == []
    notes = [line.split() for line in log.read_text().splitlines()]
    starts = [w for w in notes if w[0] == started["period"] and w[3].startswith("start@")]
    assert len(starts) == 1, f"the period's body ran {len(starts)} times"
    row = next(r for r in run_rows(sqlite_url, "shared-host") if r["id"] == started["run_id"])
    assert (row["status"], row["attempt"]) == ("succeeded", 1)
