"""`scheduler check`, a dead-man's switch, answers from the database when every node is down."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from scheduler.store.database import Database
from tests.acceptance.processes import Node, run_command, start_node
from tests.acceptance.records import run_rows
from tests.integration import seed

pytestmark = pytest.mark.slow


def _check(tmp_path: Path, database_url: str) -> tuple[int, dict[str, object]]:
    result = run_command(["check", "--json", "--database-url", database_url], tmp_path)
    assert result.stderr == ""
    return result.returncode, json.loads(result.stdout)


def _successes(node: Node) -> int:
    return sum(event.get("event") == "run_succeeded" for event in node.events())


def test_check_alerts_once_every_node_has_stopped(tmp_path: Path, postgres_url: str) -> None:
    node = start_node(tmp_path, "watcher", postgres_url, "watched")
    try:
        # Wait until periods are owed (first seen + grace) and have succeeded.
        node.wait_for(lambda _: _successes(node) >= 4, timeout=15)
        code, report = _check(tmp_path, postgres_url)
        assert (code, report["findings"], report["nodes_alive"]) == (0, [], 1)
    finally:
        assert node.stop() == 0

    last = max(row["period"] for row in run_rows(postgres_url, "watched"))
    # The grace is two seconds: after it, the next period has no run.
    time.sleep(max(0.0, (last - datetime.now(UTC)).total_seconds() + 3.5))
    code, report = _check(tmp_path, postgres_url)
    assert code == 1
    assert report["nodes_alive"] == 0
    findings = report["findings"]
    assert isinstance(findings, list)
    assert [(f["problem"], f["job"], f["status"]) for f in findings] == [
        ("overdue", "watched", None)
    ]
    assert datetime.fromisoformat(findings[0]["period"]) > last

    text = run_command(["check", "--database-url", postgres_url], tmp_path)
    assert text.returncode == 1
    assert "OVERDUE   watched" in text.stdout
    assert "no node is alive" in text.stdout
    nodes = json.loads(
        run_command(["nodes", "--json", "--database-url", postgres_url], tmp_path).stdout
    )
    assert [(n["name"], n["state"]) for n in nodes] == [("watcher", "stopped")]


def test_check_and_items_list_stuck_items_of_every_job(
    tmp_path: Path, database_url: str, database: Database
) -> None:
    """An item whose attempt ended without finishing it waits for an operator: `check`
    says so (exit 1), and `items --stuck` lists it without naming the job."""
    long_ago = seed.now() - timedelta(days=30)
    seed.add_job(database, "mailer", "0 0 1 1 *", first_seen=seed.now())
    seed.add_job(database, "billing", "0 0 1 1 *", first_seen=seed.now())
    period = datetime(2026, 1, 1, tzinfo=UTC)
    run_id = seed.add_run(database, "mailer", period, "abandoned", finished_at=long_ago)
    busy = seed.add_run(database, "billing", period, "running")
    seed.add_item(database, "mailer", "email:42", period, run_id)
    seed.add_item(database, "billing", "charge:7", period, busy)  # in progress: not stuck

    code, report = _check(tmp_path, database_url)
    assert code == 1
    findings = report["findings"]
    assert isinstance(findings, list)
    (finding,) = findings
    assert (finding["problem"], finding["job"], finding["status"]) == ("stuck", "mailer", "claimed")
    assert "'email:42'" in finding["detail"]
    text = run_command(["check", "--database-url", database_url], tmp_path)
    assert text.returncode == 1
    assert text.stdout.splitlines()[0].split()[:2] == ["STUCK", "mailer"]

    listed = run_command(["items", "--stuck", "--database-url", database_url], tmp_path)
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split()[:3] == ["JOB", "KEY", "STATE"]
    assert row.split()[:3] == ["mailer", "email:42", "stuck"]

    done = run_command(
        ["items", "done", "mailer", "email:42", "--database-url", database_url], tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert _check(tmp_path, database_url)[0] == 0
