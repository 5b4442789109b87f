"""A node's own view of what it holds: a lease it cannot renew is given up on its own
clock before the database can hand it to anyone, and a timed-out attempt that is still
running keeps its retry waiting."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.acceptance.processes import jobmods, run_command, start_node
from tests.acceptance.tcp_proxy import Proxy

pytestmark = pytest.mark.slow
LEASE_S = 3  # the `long` job's


@pytest.mark.postgres
def test_a_lease_never_renewed_is_given_up_within_the_lease(
    tmp_path: Path, postgres_url: str
) -> None:
    """The database goes away right after the claim, before any renewal: the node must
    stop treating the run as its own before the lease it got with the claim runs out
    (when another node may take it), not a lease after its first failed heartbeat."""
    proxy = Proxy(target_port=5432)
    proxy.start()
    log = tmp_path / "executions.txt"
    node = start_node(
        tmp_path,
        "cut-off",
        proxy.url(postgres_url),
        "long",
        EXECUTION_LOG=str(log),
        LONG_SECONDS="8",
    )
    try:
        node.wait_for(lambda event: event.get("event") == "run_started")
        proxy.cut()
        cut_at = time.time()
        lost = node.wait_for(lambda event: event.get("event") == "lease_lost", timeout=15)
    finally:
        proxy.start()
        assert node.stop() == 0
        proxy.cut()
    lost_at = datetime.fromisoformat(lost["timestamp"].replace("Z", "+00:00")).timestamp()
    assert lost_at - cut_at < LEASE_S, f"lease_lost {lost_at - cut_at:.2f}s after the cut"


def test_a_retry_waits_for_the_timed_out_attempt_to_stop(tmp_path: Path, sqlite_url: str) -> None:
    log = tmp_path / "executions.txt"
    result = run_command(
        [
            "trigger",
            "stubborn",
            "--database-url",
            sqlite_url,
            "--jobs",
            jobmods("stubborn"),
            "--log-format",
            "json",
        ],
        tmp_path,
        EXECUTION_LOG=str(log),
    )
    assert result.returncode == 1, result.stdout[-2000:]
    steps = [(int(line.split()[2]), line.split()[3]) for line in log.read_text().splitlines()]
    assert steps[:2] == [(1, "start"), (1, "done")], f"attempt 2 ran beside attempt 1: {steps}"
    assert steps[2] == (2, "start")
