"""A node dies, freezes or loses its connections: no period runs twice or vanishes."""

from __future__ import annotations

import signal
import time
from collections import Counter
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path

import psycopg
import pytest

from scheduler.states import Reason, RunStatus
from tests.acceptance.processes import Node, start_node
from tests.acceptance.records import attempt_rows, run_rows
from tests.acceptance.tcp_proxy import Proxy

pytestmark = pytest.mark.slow
LEASE_S = 3


def _lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def _holder_of_first_start(nodes: list[Node], log: Path) -> tuple[Node, str, str]:
    """Wait until some node starts the long job; return it, the period and the run id."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for node in nodes:
            for event in node.events():
                if event.get("event") == "run_started" and event.get("job") == "long":
                    return node, event["period"], event["run_id"]
        time.sleep(0.05)
    raise AssertionError(f"no node started the job; {_lines(log)}")


def test_sigkill_of_the_running_node_hands_the_period_to_another(
    tmp_path: Path, postgres_url: str
) -> None:
    log = tmp_path / "executions.txt"
    nodes = [
        start_node(tmp_path, f"node{n}", postgres_url, "long", EXECUTION_LOG=str(log))
        for n in range(3)
    ]
    try:
        victim, period, run_id = _holder_of_first_start(nodes, log)
        victim.kill()
        killed_at = time.monotonic()
        survivors = [node for node in nodes if node is not victim]
        retaken = None
        while retaken is None and time.monotonic() - killed_at < 20:
            for node in survivors:
                for event in node.events():
                    if event.get("event") == "run_retaken" and event.get("run_id") == run_id:
                        retaken = time.monotonic() - killed_at
            time.sleep(0.05)
        assert retaken is not None, "no survivor retook the period"
        # Lease TTL plus one recovery pass (the pass is timed to the lease expiry).
        assert retaken <= LEASE_S + 1.5, retaken
        done = time.monotonic() + 15
        while time.monotonic() < done:
            row = next(row for row in run_rows(postgres_url, "long") if row["id"] == run_id)
            if row["status"] == RunStatus.SUCCEEDED:
                break
            time.sleep(0.2)
    finally:
        codes = [node.stop() for node in nodes if node is not victim]
    assert codes == [0, 0]
    row = next(row for row in run_rows(postgres_url, "long") if row["id"] == run_id)
    assert (row["status"], row["attempt"]) == (RunStatus.SUCCEEDED, 2)
    (dead,) = attempt_rows(postgres_url, run_id=run_id)
    assert (dead["status"], dead["reason"]) == (RunStatus.ABANDONED, Reason.LEASE_EXPIRED)
    assert str(dead["node"]).startswith(f"{victim.name}-")
    assert not str(row["holder"]).startswith(f"{victim.name}-")
    finished = Counter(words[0] for words in _lines(log) if words[3] == "done")
    assert finished[period] == 1
    assert [p for p, count in finished.items() if count > 1] == []
    ran = [row for row in run_rows(postgres_url, "long") if row["status"] == RunStatus.SUCCEEDED]
    # Every other period called its function once. One of them may be on a second
    # attempt all the same: a period a survivor claimed while the killed one's retry
    # ran elsewhere waits its turn there; stopped first, that survivor gives it back
    # unstarted, and the other survivor runs it (attempt 2, its first start).
    others = [row for row in ran if row["id"] != run_id]
    assert [row["period"] for row in others if row["started_attempts"] != 1] == []
    given_back = {
        event["run_id"]
        for node in survivors
        for event in node.events()
        if event.get("event") == "run_given_back" and event.get("reason") == Reason.SHUTDOWN
    }
    assert [row["id"] for row in others if row["attempt"] > 1 and row["id"] not in given_back] == []


def test_a_frozen_node_is_refused_when_it_wakes(tmp_path: Path, postgres_url: str) -> None:
    log = tmp_path / "executions.txt"
    frozen = start_node(tmp_path, "frozen", postgres_url, "long", EXECUTION_LOG=str(log))
    frozen.wait_for(lambda event: event.get("event") == "run_started")
    (first,) = [e for e in frozen.events() if e.get("event") == "run_started"][:1]
    frozen.signal(signal.SIGSTOP)
    other = start_node(
        tmp_path, "other", postgres_url, "long", EXECUTION_LOG=str(log), LONG_SECONDS="1"
    )
    try:
        other.wait_for(
            lambda event: (
                event.get("event") == "run_succeeded" and event.get("run_id") == first["run_id"]
            ),
            timeout=20,
        )
        frozen.signal(signal.SIGCONT)
        refused = frozen.wait_for(
            lambda event: (
                event.get("event") in ("run_outcome_refused", "lease_lost")
                and event.get("run_id") == first["run_id"]
            ),
            timeout=15,
        )
    finally:
        frozen.signal(signal.SIGCONT)
        codes = [frozen.stop(), other.stop()]
    assert codes == [0, 0]
    assert refused["run_id"] == first["run_id"]
    row = next(row for row in run_rows(postgres_url, "long") if row["id"] == first["run_id"])
    assert (row["status"], row["attempt"]) == (RunStatus.SUCCEEDED, 2)
    assert str(row["holder"]).startswith("other")


def test_terminated_connections_do_not_stop_the_daemon(tmp_path: Path, postgres_url: str) -> None:
    log = tmp_path / "executions.txt"
    node = start_node(
        tmp_path, "survivor", postgres_url, "long,ticker", EXECUTION_LOG=str(log), LONG_SECONDS="2"
    )
    try:
        started = node.wait_for(
            lambda event: event.get("event") == "run_started" and event.get("job") == "long"
        )
        database_name = postgres_url.rsplit("/", 1)[1]
        with psycopg.connect(
            postgres_url.rsplit("/", 1)[0] + "/postgres", autocommit=True
        ) as admin:
            killed = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = %s AND application_name LIKE 'scheduler%%'",
                (database_name,),
            ).fetchone()
        assert killed is not None
        assert killed[0] >= 1
        terminated_at = time.time()
        time.sleep(6)
        assert node.process.poll() is None, "the daemon exited"
    finally:
        assert node.stop() == 0
    row = next(row for row in run_rows(postgres_url, "long") if row["id"] == started["run_id"])
    assert row["status"] == RunStatus.SUCCEEDED
    later = [
        row
        for row in run_rows(postgres_url, "tick")
        if row["period"].timestamp() > terminated_at + 1 and row["status"] == RunStatus.SUCCEEDED
    ]
    assert len(later) >= 3, "the schedule did not go on after the connections were killed"


@pytest.mark.parametrize(
    "outage_s", [1.0, LEASE_S + 3.0], ids=["shorter-than-the-lease", "longer-than-the-lease"]
)
def test_a_database_that_refuses_connections_for_a_while(
    tmp_path: Path, postgres_url: str, outage_s: float
) -> None:
    """The database goes away mid-run and comes back: the node waits, reconnects, goes on.

    When the outage outlasts the lease, the node gives the run up (`lease_lost`) and its
    own recovery may retake it as attempt 2 while attempt 1 is still in the job function:
    then attempt 1's late outcome is refused (or, if it lands first, it is `abandoned`
    and the period runs again) and attempt 2 runs after it, never beside it.
    Either way the period ends succeeded, once.
    """
    proxy = Proxy(target_port=5432)
    proxy.start()
    base, _, name = postgres_url.rpartition("/")
    proxied_url = f"{base.rsplit('@', 1)[0]}@127.0.0.1:{proxy.port}/{name}"
    log = tmp_path / "executions.txt"
    node = start_node(
        tmp_path, "patient", proxied_url, "long,ticker", EXECUTION_LOG=str(log), LONG_SECONDS="3"
    )
    try:
        started = node.wait_for(
            lambda event: event.get("event") == "run_started" and event.get("job") == "long"
        )
        proxy.cut()
        cut_at = time.time()
        node.wait_for(lambda event: event.get("event") == "database_unavailable", timeout=15)
        time.sleep(outage_s)
        proxy.start()
        node.wait_for(
            lambda event: (
                event.get("event") == "run_succeeded"
                and event.get("job") == "tick"
                and event.get("period", "") > datetime.fromtimestamp(cut_at + 2, UTC).isoformat()
            ),
            timeout=20,
        )
        finished = node.wait_for(
            lambda event: (
                event.get("event") == "run_succeeded" and event.get("run_id") == started["run_id"]
            ),
            timeout=20,
        )
        assert node.process.poll() is None
    finally:
        assert node.stop() == 0
        proxy.cut()
    row = next(row for row in run_rows(postgres_url, "long") if row["id"] == started["run_id"])
    assert (row["status"], row["attempt"]) == (RunStatus.SUCCEEDED, finished["attempt"])
    about_the_run = [event for event in node.events() if event.get("run_id") == row["id"]]
    # An earlier attempt, given up, ends fenced off (retaken first) or given back to run
    # again (its write landed first): either way it is not the period's outcome.
    ended = {"run_outcome_refused", "run_abandoned"}
    earlier = [e["attempt"] for e in about_the_run if e["event"] in ended]
    assert earlier == list(range(1, finished["attempt"])), "an earlier attempt kept its outcome"
    if outage_s > LEASE_S:
        assert [e["attempt"] for e in about_the_run if e["event"] == "lease_lost"] == [1]
    # The job's own log: each attempt of the period starts only after the previous one ended.
    steps = [
        (int(attempt), what)
        for period, _, attempt, what, job in (line for line in _lines(log) if len(line) == 5)
        if job == "long" and period == row["period"].isoformat()
    ]
    expected = [(n, what) for n in range(1, finished["attempt"] + 1) for what in ("start", "done")]
    assert steps == expected
    ran = sorted(
        (row["started_at"], row["finished_at"])
        for row in run_rows(postgres_url, "long")
        if row["status"] == RunStatus.SUCCEEDED
    )
    assert all(start >= end for (_, end), (start, _) in pairwise(ran)), "two periods overlapped"
