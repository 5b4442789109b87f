"""Downtime never silently loses a period: catch-up after every node was stopped."""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from scheduler.states import Origin, Reason, RunStatus
from tests.acceptance.processes import Node, start_node
from tests.acceptance.records import missing_seconds, run_rows

pytestmark = pytest.mark.slow
JOBS = ("catchup-all", "catchup-latest", "catchup-none")


def _serve(tmp_path: Path, url: str, names: list[str], seconds: float, **env: str) -> list[Node]:
    nodes = [start_node(tmp_path, name, url, "catchers", **env) for name in names]
    for node in nodes:
        node.wait_for(lambda event: event.get("event") == "node_started")
    time.sleep(seconds)
    return nodes


def _stop(nodes: list[Node]) -> None:
    assert [node.stop() for node in nodes] == [0] * len(nodes)


def _downtime(rows: list[dict[str, Any]], down: datetime, up: datetime) -> list[dict[str, Any]]:
    return [row for row in rows if down < row["period"] < up]


def _executions(log: Path, job: str) -> Counter[str]:
    """How many times the job's body ran for each period, from its own evidence."""
    lines = [line.split() for line in log.read_text().splitlines()]
    return Counter(words[0] for words in lines if words[-1] == job)


def test_each_policy_after_downtime(tmp_path: Path, postgres_url: str) -> None:
    log = tmp_path / "executions.txt"
    _stop(_serve(tmp_path, postgres_url, ["first"], 3, EXECUTION_LOG=str(log)))
    down = datetime.now().astimezone()
    time.sleep(6)
    up = datetime.now().astimezone()
    _stop(_serve(tmp_path, postgres_url, ["second"], 4, EXECUTION_LOG=str(log)))

    everything = {job: run_rows(postgres_url, job) for job in JOBS}
    for job, rows in everything.items():
        assert missing_seconds([row["period"] for row in rows]) == [], job
    all_rows = _downtime(everything["catchup-all"], down, up)
    assert len(all_rows) >= 5
    assert {row["status"] for row in all_rows} == {RunStatus.SUCCEEDED}
    assert {row["origin"] for row in all_rows} == {Origin.CATCHUP}

    # The catch-up pass at start covers the downtime and the second or so the new
    # node took to start; its rows are the catch-up rows after the first node's last
    # live period. (The first node's own start may have left a catch-up row too: the
    # job is registered a moment before its live loop begins, and on a loaded machine
    # a second can turn over in between.)
    first_live = max(
        row["period"]
        for row in everything["catchup-latest"]
        if row["origin"] == Origin.SCHEDULE and row["period"] < down
    )
    latest = [
        row
        for row in everything["catchup-latest"]
        if row["origin"] == Origin.CATCHUP and row["period"] > first_live
    ]
    assert {row["period"] for row in _downtime(everything["catchup-latest"], down, up)} <= {
        row["period"] for row in latest
    }
    ran = [row for row in latest if row["status"] == RunStatus.SUCCEEDED]
    assert len(ran) == 1
    assert ran[0]["period"] == max(row["period"] for row in latest)
    assert {(row["status"], row["reason"]) for row in latest if row is not ran[0]} == {
        (RunStatus.SKIPPED, Reason.CATCHUP)
    }

    none = [row for row in everything["catchup-none"] if row["origin"] == Origin.CATCHUP]
    assert len(none) >= 5
    assert {(row["status"], row["reason"]) for row in none} == {(RunStatus.SKIPPED, Reason.CATCHUP)}

    for job in JOBS:
        assert [period for period, n in _executions(log, job).items() if n > 1] == [], job


def _assert_each_period_ran_once(url: str, log: Path) -> list[dict[str, Any]]:
    rows = run_rows(url, "catchup-all")
    assert missing_seconds([row["period"] for row in rows]) == []
    statuses = Counter(row["status"] for row in rows)
    assert set(statuses) <= {RunStatus.SUCCEEDED, RunStatus.SKIPPED}, statuses
    executions = _executions(log, "catchup-all")
    assert [period for period, count in executions.items() if count > 1] == []
    succeeded = {row["period"].isoformat() for row in rows if row["status"] == RunStatus.SUCCEEDED}
    assert succeeded <= set(executions)
    return rows


def test_a_crash_mid_catch_up_then_two_nodes_run_nothing_twice(
    tmp_path: Path, postgres_url: str
) -> None:
    log = tmp_path / "executions.txt"
    env = {"EXECUTION_LOG": str(log), "WORK_SECONDS": "0.4"}
    _stop(_serve(tmp_path, postgres_url, ["first"], 2, **env))
    time.sleep(8)
    catcher = start_node(tmp_path, "catcher", postgres_url, "catchers", **env)
    catcher.wait_for(lambda event: event.get("event") == "catchup_claimed")
    time.sleep(1)
    catcher.kill()
    _stop(_serve(tmp_path, postgres_url, ["a", "b"], 12, **env))
    rows = _assert_each_period_ran_once(postgres_url, log)
    assert [row for row in rows if row["attempt"] > 1], "the killed node's claims were not retaken"


def test_three_nodes_starting_together_catch_up_each_period_once(
    tmp_path: Path, postgres_url: str
) -> None:
    log = tmp_path / "executions.txt"
    env = {"EXECUTION_LOG": str(log)}
    _stop(_serve(tmp_path, postgres_url, ["first"], 2, **env))
    down = datetime.now().astimezone()
    time.sleep(6)
    up = datetime.now().astimezone()
    _stop(_serve(tmp_path, postgres_url, ["a", "b", "c"], 5, **env))
    rows = _assert_each_period_ran_once(postgres_url, log)
    missed = _downtime(rows, down, up)
    assert len(missed) >= 5
    assert {(row["status"], row["origin"]) for row in missed} == {
        (RunStatus.SUCCEEDED, Origin.CATCHUP)
    }
