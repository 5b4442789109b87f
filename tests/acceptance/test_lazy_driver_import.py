"""Nodes on SQLite whose jobs import psycopg lazily, in a run thread, while the node's
side threads use the store: the half-imported driver is none of the store's business,
and no node dies of it, however many times the nodes are killed and started again."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.acceptance.processes import Node, start_node

pytestmark = pytest.mark.slow
NODES = 3
CYCLES = 3


def _start(tmp_path: Path, url: str, name: str, cycle: int, evidence: Path) -> Node:
    return start_node(
        tmp_path / f"cycle{cycle}",
        name,
        url,
        "lazy_psycopg",
        EXECUTION_LOG=str(evidence),
    )


def _ran_after_import(node: Node) -> None:
    """The node ran one of the jobs, whose import of psycopg took PSYCOPG_IMPORT_DELAY:
    the store was used all that while by its side threads."""
    node.wait_for(
        lambda event: (
            event.get("event") == "run_succeeded"
            and str(event.get("job", "")).startswith("report_")
        ),
        timeout=40,
    )


def test_sqlite_nodes_survive_jobs_that_import_psycopg_lazily(
    tmp_path: Path, sqlite_url: str
) -> None:
    evidence = tmp_path / "executions.txt"
    started: list[Node] = []
    try:
        for cycle in range(CYCLES):
            (tmp_path / f"cycle{cycle}").mkdir()
            nodes = [
                _start(tmp_path, sqlite_url, f"node{n}", cycle, evidence) for n in range(NODES)
            ]
            started += nodes
            for node in nodes:
                _ran_after_import(node)
            time.sleep(1)  # the side threads go on after the import ended
            crashed = [
                (node.name, event)
                for node in nodes
                for event in node.events()
                if str(event.get("event", "")).endswith("_crashed")
            ]
            assert crashed == [], crashed
            exited = {node.name: node.process.poll() for node in nodes}
            assert set(exited.values()) == {None}, f"cycle {cycle}: nodes exited: {exited}"
            for node in nodes:
                node.kill()  # SIGKILL: the next cycle's nodes retake what these held
    finally:
        for node in started:
            node.kill()
    lines = [line.split() for line in evidence.read_text().splitlines()]
    # The first run of each process found psycopg not yet imported: the import under test
    # happened in a run, with the node's threads up.
    assert sum(line[3] == "False" for line in lines) >= NODES * CYCLES
