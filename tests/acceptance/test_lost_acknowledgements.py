"""A write reaches the database and is committed, but its reply never comes back: the
connection dropped at the worst moment. The node must find out what it already wrote,
not wedge the job nor take its own write for somebody else's."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from scheduler.states import RunStatus
from tests.acceptance.processes import Node, start_node
from tests.acceptance.records import executions, run_rows
from tests.acceptance.tcp_proxy import Proxy

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
START_STATEMENT = b"SET status = 'running'"
OUTCOME_STATEMENT = b"SET status = done.status"


def _node_behind_proxy(
    tmp_path: Path, postgres_url: str, jobs: str = "ticker", *extra: str
) -> tuple[Node, Proxy, Path]:
    proxy = Proxy(target_port=5432, framed=True)
    proxy.start()
    log = tmp_path / "executions.txt"
    node = start_node(
        tmp_path, "node", proxy.url(postgres_url), jobs, extra, EXECUTION_LOG=str(log)
    )
    node.wait_for(lambda event: event.get("event") == "run_succeeded")
    return node, proxy, log


def _iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat()


def _lose_one_reply(
    tmp_path: Path, postgres_url: str, statement: bytes, jobs: str = "ticker", *extra: str
) -> tuple[Node, Path, float]:
    """Run a node until one `statement` was committed with its reply lost, and until the
    job has gone on for a few more periods; return the node, its job log and when."""
    node, proxy, log = _node_behind_proxy(tmp_path, postgres_url, jobs, *extra)
    try:
        sprung = proxy.lose_reply_to(statement)
        assert sprung.wait(10), "no such statement went through the proxy"
        lost_at = time.time()
        node.wait_for(
            lambda event: (
                event.get("event") == "run_succeeded" and event["period"] > _iso(lost_at + 3)
            ),
            timeout=20,
        )
    finally:
        assert node.stop() == 0
        proxy.cut()
    return node, log, lost_at


def test_a_start_whose_reply_was_lost_runs_and_the_job_goes_on(
    tmp_path: Path, postgres_url: str
) -> None:
    """A start statement of its own (the node's one worker is busy when the period is
    claimed, so the claim cannot start it) commits with its reply lost."""
    _, log, lost_at = _lose_one_reply(
        tmp_path, postgres_url, START_STATEMENT, "crowded", "--workers", "1"
    )
    rows = run_rows(postgres_url, "tick")
    ran = executions(log)
    assert [period for period, times in ran.items() if times > 1] == []
    since = [row for row in rows if row["period"].timestamp() >= lost_at - 1]
    wedged = [row["period"] for row in since if row["status"] != RunStatus.SUCCEEDED]
    assert len(wedged) <= 1, f"periods skipped or stuck after the lost reply: {wedged}"
    assert {row["period"].isoformat() for row in since if row["status"] == "succeeded"} <= set(ran)


def test_an_outcome_whose_reply_was_lost_is_known_as_written(
    tmp_path: Path, postgres_url: str
) -> None:
    node, _, _ = _lose_one_reply(tmp_path, postgres_url, OUTCOME_STATEMENT)
    refused = [event for event in node.events() if event.get("event") == "run_outcome_refused"]
    assert refused == [], "the node took its own written outcome for a refusal"
    succeeded = {event["run_id"] for event in node.events() if event["event"] == "run_succeeded"}
    written = {row["id"] for row in run_rows(postgres_url, "tick") if row["status"] == "succeeded"}
    assert written == succeeded, "an outcome was written but not reported (nor counted)"


CLAIM_STATEMENT = b"started_attempts, holder, lease_seconds, lease_expires_at"


def test_a_claim_whose_reply_was_lost_costs_no_period(tmp_path: Path, postgres_url: str) -> None:
    """The claim of a period commits but its reply is lost (the connection resets): the
    node tries again, finds the row in its own name (claimed, or already running where
    the claim started it), runs it, and skips nothing."""
    _, log, lost_at = _lose_one_reply(tmp_path, postgres_url, CLAIM_STATEMENT)
    rows = [
        row for row in run_rows(postgres_url, "tick") if row["period"].timestamp() >= lost_at - 1
    ]
    ran = executions(log)
    assert [period for period, times in ran.items() if times > 1] == []
    not_run = [(row["period"], row["status"]) for row in rows if row["status"] != "succeeded"]
    assert not_run == [], f"periods lost to the reset: {not_run}"
