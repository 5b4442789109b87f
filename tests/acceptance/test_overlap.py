"""A 3-second job every second on three nodes, once per overlap policy."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

import pytest

from scheduler.states import Reason, RunStatus
from tests.acceptance.processes import start_node
from tests.acceptance.records import run_rows
from tests.databases import postgres_database

pytestmark = pytest.mark.slow


def _intervals(rows: list[dict[str, Any]]) -> list[tuple[datetime, datetime]]:
    return sorted(
        (row["started_at"], row["finished_at"])
        for row in rows
        if row["status"] == RunStatus.SUCCEEDED
    )


def _overlapping(intervals: list[tuple[datetime, datetime]]) -> int:
    return sum(1 for (_, end), (start, _) in pairwise(intervals) if start < end)


@pytest.fixture(scope="module")
def history(
    tmp_path_factory: pytest.TempPathFactory, postgres_template: str
) -> dict[str, list[dict[str, Any]]]:
    """Run the three jobs on three nodes for 12 s and read back their runs."""
    tmp_path = tmp_path_factory.mktemp("overlap")
    with postgres_database(template=postgres_template) as url:
        nodes = [
            start_node(tmp_path, f"node{n}", url, "overlaps", ["--grace", "10s"]) for n in range(3)
        ]
        try:
            for node in nodes:
                node.wait_for(lambda event: event.get("event") == "node_started")
            time.sleep(12)
        finally:
            codes = [node.stop() for node in nodes]
        assert codes == [0, 0, 0]
        return {policy: run_rows(url, f"overlap-{policy}") for policy in ("skip", "queue", "allow")}


def test_skip_never_runs_two_periods_at_once(history: dict[str, list[dict[str, Any]]]) -> None:
    rows = history["skip"]
    intervals = _intervals(rows)
    assert len(intervals) >= 3
    assert _overlapping(intervals) == 0
    skipped = [row for row in rows if row["status"] == RunStatus.SKIPPED]
    assert len(skipped) >= 6
    assert {row["reason"] for row in skipped} == {Reason.OVERLAP}
    assert {row["status"] for row in rows} <= {RunStatus.SUCCEEDED, RunStatus.SKIPPED}
    # What the skips stood on: each 3-second body was said to have begun, after its
    # start and long before its end (the word travels with the node's next write).
    for row in rows:
        if row["status"] == RunStatus.SUCCEEDED:
            assert row["started_at"] <= row["began_at"] < row["finished_at"]
            assert row["began_at"] - row["started_at"] < timedelta(seconds=1)


def test_queue_runs_the_waiting_period_after_the_running_one(
    history: dict[str, list[dict[str, Any]]],
) -> None:
    rows = history["queue"]
    intervals = _intervals(rows)
    assert len(intervals) >= 3
    assert _overlapping(intervals) == 0
    waited = [
        row
        for row in rows
        if row["status"] == RunStatus.SUCCEEDED
        and row["started_at"] - row["period"] > timedelta(seconds=1)
    ]
    assert waited, "no queued period waited for its predecessor"
    # One period waits at most; further ones are skipped rather than piling up.
    skipped = [row for row in rows if row["status"] == RunStatus.SKIPPED]
    assert skipped
    assert {row["reason"] for row in skipped} == {Reason.OVERLAP}


def test_allow_runs_periods_side_by_side(history: dict[str, list[dict[str, Any]]]) -> None:
    rows = history["allow"]
    intervals = _intervals(rows)
    assert len(intervals) >= 9
    assert _overlapping(intervals) >= 5
    assert not [row for row in rows if row["status"] == RunStatus.SKIPPED]
