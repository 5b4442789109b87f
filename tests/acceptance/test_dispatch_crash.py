"""A crash in dispatch never leaves a run held (issue 42, item 10): a run's child
process that dies before it says anything made the node crash reading its pipe, the
period stayed `running` in the node's name (renewed by its heartbeat) and every later
period of the job was skipped for overlap until the heartbeat adopted the stray a
minute later."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.acceptance.processes import start_node
from tests.acceptance.records import run_rows

pytestmark = pytest.mark.slow


def test_a_child_that_dies_without_a_word_fails_its_attempt_and_holds_nothing(
    tmp_path: Path, sqlite_url: str
) -> None:
    node = start_node(tmp_path, "node", sqlite_url, "native_crash")
    try:
        node.wait_for(lambda event: event.get("event") == "node_started")
        time.sleep(8)
    finally:
        assert node.stop() == 0
    events = node.events()
    assert [e for e in events if e.get("event") == "dispatch_crashed"] == []
    rows = run_rows(sqlite_url, "native-crash")
    assert len(rows) >= 5
    settled = rows[:-2]  # the last ones may still have been running at the stop
    statuses = {(row["status"], row["reason"], row["error_type"]) for row in settled}
    assert statuses == {("failed", None, "ChildProcessError")}, statuses
    assert all("exit code 3" in row["error_message"] for row in settled)
