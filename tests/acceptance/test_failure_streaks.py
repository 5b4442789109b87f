"""Failure streaks on real nodes (issue 44, item 2): three `scheduler run` processes on
PostgreSQL (one on SQLite) run a job that fails every second. Its third failure in a
row pages once, its sixth pauses it (shown in `scheduler jobs` as paused by failures);
once the fault is gone and an operator resumes it, one `recovered` ends the streak.
The hook hears each of the three once, whatever the replica count."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from scheduler.store import deliveries as stored_events
from scheduler.store import jobs as stored_jobs
from scheduler.store.database import open_database
from tests.acceptance.processes import run_command, start_node
from tests.acceptance.records import run_rows
from tests.waiting import wait_until

pytestmark = pytest.mark.slow


def _heard(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def _events(database_url: str) -> list[tuple[str, int | None]]:
    database = open_database(database_url)
    try:
        found = stored_events.recent(database, job="streaky", limit=100)
    finally:
        database.dispose()
    return [(row.event.kind.value, row.event.streak) for row in reversed(found)]


def _job(database_url: str) -> Any:
    database = open_database(database_url)
    try:
        return stored_jobs.all_jobs(database, ["streaky"])[0]
    finally:
        database.dispose()


def test_a_streak_pages_once_pauses_the_job_and_recovers_once(
    tmp_path: Path, database_url: str
) -> None:
    replicas = 3 if database_url.startswith("postgresql") else 1
    heard, broken = tmp_path / "heard.jsonl", tmp_path / "broken"
    broken.touch()
    env = {"HEARD_LOG": str(heard), "STREAKY_BROKEN": str(broken)}
    nodes = [
        start_node(tmp_path, f"node-{n}", database_url, "streaky", **env) for n in range(replicas)
    ]
    try:
        for node in nodes:
            node.wait_for(lambda event: event.get("event") == "node_started")
        wait_until(lambda: _job(database_url).paused, timeout=30)
        paused = _job(database_url)
        assert paused.pause_reason == "paused by the scheduler: 6 periods failed in a row"
        listed = run_command(["jobs", "--database-url", database_url, "--json"], tmp_path)
        (record,) = [r for r in json.loads(listed.stdout) if r["name"] == "streaky"]
        assert record["pause_reason"] == paused.pause_reason
        table = run_command(["jobs", "--database-url", database_url], tmp_path).stdout
        assert "paused (failures)" in table
        checked = run_command(["check", "--database-url", database_url, "--json"], tmp_path)
        assert checked.returncode != 0
        findings = json.loads(checked.stdout)["findings"]
        assert [(f["problem"], f["job"]) for f in findings if f["job"] == "streaky"][-1] == (
            "paused_by_failures",
            "streaky",
        ), findings
        # Paused, the job runs nothing more: the periods that pass are skipped.
        time.sleep(2.5)
        failed = [row for row in run_rows(database_url, "streaky") if row["status"] == "failed"]
        assert 6 <= len(failed) <= 6 + replicas  # runs begun before the pause may end failed
        assert _events(database_url) == [("failed", 3), ("paused", 6)]
        # The fault is gone; an operator resumes the job; its next run ends the streak.
        broken.unlink()
        resumed = run_command(["resume", "streaky", "--database-url", database_url], tmp_path)
        assert resumed.returncode == 0, resumed.stderr
        wait_until(lambda: len(_heard(heard)) >= 3, timeout=30)
        time.sleep(2)
    finally:
        codes = [node.stop() for node in nodes]
    assert codes == [0] * replicas, [node.log_path.read_text()[-2000:] for node in nodes]
    kinds = [(line["kind"], line["streak"]) for line in _heard(heard)]
    assert kinds == [("failed", 3), ("paused", 6), ("recovered", len(failed))], kinds
    assert _events(database_url) == kinds
    assert _heard(heard)[0]["detail"] == (
        "3 periods failed in a row; RuntimeError: the upstream is down"
    )
    assert not _job(database_url).paused
    assert [row["status"] for row in run_rows(database_url, "streaky")].count("succeeded") >= 1
