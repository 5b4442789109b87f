"""A thread job that ignores its timeout, on a real node: recorded `timed_out` at the
deadline, said once to be overdue (`run_overdue`) while it goes on running, shown as
`lingering` by `scheduler check` and by the console, and its later periods run again
once it returns."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from scheduler.states import Reason, RunStatus
from tests.acceptance.console_client import Console
from tests.acceptance.processes import Node, run_command, start_node
from tests.acceptance.records import run_rows

pytestmark = pytest.mark.slow


def _check(tmp_path: Path, database_url: str) -> tuple[int, list[dict[str, Any]]]:
    result: subprocess.CompletedProcess[str] = run_command(
        ["check", "--database-url", database_url, "--json", "--job", "overrun"], tmp_path
    )
    return result.returncode, json.loads(result.stdout)["findings"]


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _named(node: Node, name: str) -> list[dict[str, Any]]:
    return [e for e in node.events() if e.get("event") == name and e.get("job") == "overrun"]


def test_a_thread_body_past_its_timeout_is_said_once_and_shown_while_it_runs(
    tmp_path: Path, sqlite_url: str
) -> None:
    release = tmp_path / "overrun.release"
    node = start_node(
        tmp_path,
        "overrunner",
        sqlite_url,
        "overrun",
        ["--http", "127.0.0.1:0"],
        EXECUTION_LOG=str(tmp_path / "executions.txt"),
        OVERRUN_RELEASE=str(release),
    )
    try:
        console = Console.of(node)
        timed_out = node.wait_for(
            lambda e: e.get("event") == "run_timed_out" and e.get("job") == "overrun", timeout=20
        )
        overdue = node.wait_for(
            lambda e: e.get("event") == "run_overdue" and e.get("job") == "overrun", timeout=10
        )
        assert overdue["level"] == "warning"
        assert (overdue["run_id"], overdue["period"]) == (timed_out["run_id"], timed_out["period"])
        assert overdue["timeout_s"] == 1.0
        assert 2.0 <= overdue["running_s"] < 10.0

        code, findings = _check(tmp_path, sqlite_url)
        assert code == 1
        lingering = [f for f in findings if f["problem"] == "lingering"]
        assert [(f["job"], _instant(f["period"]), f["status"]) for f in lingering] == [
            ("overrun", _instant(timed_out["period"]), "timed_out")
        ]
        assert "still running on overrunner" in lingering[0]["detail"]
        run_page = console.get(f"/runs/{timed_out['run_id']}").body
        assert "<dt>still running</dt>" in run_page
        nodes_page = console.get("/nodes").body
        assert f'<a href="/runs/{timed_out["run_id"]}">' in nodes_page
        assert "(timed out, still running)" in nodes_page

        release.touch()
        node.wait_for(
            lambda e: e.get("event") == "run_succeeded" and e.get("job") == "overrun", timeout=15
        )
        code, findings = _check(tmp_path, sqlite_url)
        assert [(f["problem"], _instant(f["period"])) for f in findings] == [
            ("timed_out", _instant(timed_out["period"]))
        ]
        assert "<dt>still running</dt>" not in console.get(f"/runs/{timed_out['run_id']}").body
    finally:
        release.touch()
        assert node.stop() == 0
    assert len(_named(node, "run_overdue")) == 1
    rows = run_rows(sqlite_url, "overrun")
    first = _instant(timed_out["period"])
    (lingered,) = [row for row in rows if row["period"] == first]
    assert (lingered["status"], lingered["lease_expires_at"]) == (RunStatus.TIMED_OUT, None)
    skipped = [row for row in rows if row["status"] == RunStatus.SKIPPED]
    assert skipped, "the periods that fell due while it ran were skipped"
    assert {row["reason"] for row in skipped} == {Reason.OVERLAP}
