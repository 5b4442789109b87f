"""`ctx.previous` on real nodes (issue 44, item 5): one node, then two sharing an
every-second job, on PostgreSQL and on SQLite; each run reads the newest earlier period
that reached an outcome, with what that run checkpointed. Every one of 60 periods,
exactly, on one node under a virtual clock: tests/integration/test_previous_period_virtual.py."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.processes import start_node

pytestmark = pytest.mark.slow


def _lines(tmp_path: Path, database_url: str, nodes: int) -> list[dict[str, Any]]:
    """Run the job on `nodes` nodes for six seconds; each run's line, oldest first."""
    log = tmp_path / "executions.txt"
    started = [
        start_node(tmp_path, f"node-{n}", database_url, "previous", EXECUTION_LOG=str(log))
        for n in range(nodes)
    ]
    try:
        for node in started:
            node.wait_for(lambda event: event.get("event") == "node_started")
        time.sleep(6)
    finally:
        assert [node.stop() for node in started] == [0] * nodes
    lines = [json.loads(text) for text in log.read_text().splitlines()]
    assert len(lines) >= 5
    return sorted(lines, key=lambda line: line["period"])


def _picked_up(lines: list[dict[str, Any]], *, nearest: float) -> None:
    """Each run read an earlier period that ran, with what that run checkpointed; at
    least `nearest` of them the one right before (a period whose outcome was still
    being written when the next began is passed over for the one before it)."""
    ran = [line["period"] for line in lines]
    assert lines[0]["previous"] is None
    right_before = 0
    for line, before in zip(lines[1:], ran, strict=False):
        assert line["previous"] in ran
        assert line["previous"] < line["period"]
        assert line["status"] == "succeeded"
        assert line["checkpoint"] == {"synced_to": line["previous"]}
        right_before += line["previous"] == before
    assert right_before >= nearest * (len(lines) - 1)


def test_each_run_picks_up_from_the_period_before_it(tmp_path: Path, database_url: str) -> None:
    _picked_up(_lines(tmp_path, database_url, 1), nearest=1.0)


def test_two_nodes_pick_up_from_each_others_periods(tmp_path: Path, database_url: str) -> None:
    _picked_up(_lines(tmp_path, database_url, 2), nearest=0.8)
