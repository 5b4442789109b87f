"""Failure detection in seconds, not in a lease: a killed node's run is taken over in
about a second, a crash loop loses no period, and a holder cut off from the database
knows it has lost before anyone may take its run.

PostgreSQL: a node's liveness is bound to a session lock on a connection of its own."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from scheduler.states import RunStatus
from tests.acceptance.processes import Node, first_event, start_node, watch_takeover, when
from tests.acceptance.records import first_pid, first_seen, notes, run_rows
from tests.acceptance.tcp_proxy import Proxy

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def test_a_killed_holder_is_noticed_in_about_a_second(tmp_path: Path, postgres_url: str) -> None:
    """Three nodes, an every-second job with the default 30 s lease; the node inside the
    job is SIGKILLed. Its period is retaken within 2 s, and at most two later periods
    are not run on time (skipped, or started more than a second late)."""
    log = tmp_path / "executions.txt"
    nodes = [
        start_node(tmp_path, f"node{n}", postgres_url, "steady", EXECUTION_LOG=str(log))
        for n in range(3)
    ]
    try:
        for node in nodes:
            node.wait_for(lambda event: event.get("event") == "node_started")
        time.sleep(3)  # every node knows its peers
        after = time.time()
        victim, started = first_event(
            nodes, lambda e: e.get("event") == "run_started" and when(e) > after
        )
        victim.kill()
        killed_at = time.time()
        others = [node for node in nodes if node is not victim]
        _, retaken = first_event(
            others,
            lambda e: e.get("event") == "run_retaken" and e.get("run_id") == started["run_id"],
            timeout=40,
        )
        time.sleep(12)
    finally:
        codes = [node.stop() for node in nodes if node is not victim]
    assert codes == [0, 0]
    delay = when(retaken) - killed_at
    assert delay <= 2.5, f"the killed period was retaken {delay:.1f} s after the kill"
    # Noticed by the watch on its liveness lock, not by anyone asking the database.
    seen = [e for node in others for e in node.events() if e.get("event") == "node_gone_seen"]
    victim_id = next(e["node"] for e in victim.events() if e.get("event") == "node_started")
    assert [e["watched"] for e in seen] == [victim_id]
    period = datetime.fromisoformat(str(started["period"]))
    later = [
        row
        for row in run_rows(postgres_url, "steady")
        if period < row["period"] <= period + timedelta(seconds=10)
    ]
    assert len(later) == 10
    late = [
        row["period"]
        for row in later
        if row["status"] != RunStatus.SUCCEEDED
        or (row["started_at"] - row["period"]).total_seconds() > 1
    ]
    assert len(late) <= 2, f"later periods not run on time: {late}"


def _settled(row: dict[str, Any]) -> bool:
    """Ran, or skipped by the overlap rule: recorded with its reason, not lost."""
    return row["status"] == "succeeded" or (row["status"], row["reason"]) == (
        "skipped",
        "overlap",
    )


@pytest.mark.parametrize("every", [1, 2, 3, 5, 7])
def test_a_crash_loop_loses_no_period(tmp_path: Path, postgres_url: str, every: int) -> None:
    """One node, SIGKILLed and restarted (same name) every `every` seconds for 12 s, then
    left to run: by the end every period of the window has run, or was skipped by the
    overlap rule, and none was given up or lost. Each restart retakes its predecessor's
    runs: behind that late work (running or waiting its turn) the first on-time period
    waits and only the next is skipped (`test_overlap_judgement`)."""
    log = tmp_path / "executions.txt"
    env = {"EXECUTION_LOG": str(log), "BODY_SECONDS": "0.2"}
    began = datetime.now(UTC)
    incarnations: list[Node] = []
    while datetime.now(UTC) - began < timedelta(seconds=12):
        node = start_node(
            tmp_path,
            f"looper-{len(incarnations)}",
            postgres_url,
            "steady",
            ["--node-name", "looper"],
            **env,
        )
        incarnations.append(node)
        time.sleep(every)
        node.kill()
    ended = datetime.now(UTC)
    final = start_node(tmp_path, "final", postgres_url, "steady", ["--node-name", "looper"], **env)

    def window() -> list[dict[str, Any]]:
        # History starts when a node first registered the job: on a loaded machine the
        # first incarnations may die before they get that far.
        start = max(began, first_seen(postgres_url, "steady")) + timedelta(seconds=2)
        rows = run_rows(postgres_url, "steady")
        return [row for row in rows if start <= row["period"] <= ended]

    def expected() -> int:
        start = max(began, first_seen(postgres_url, "steady")) + timedelta(seconds=2)
        return int((ended - start).total_seconds())

    try:
        final.wait_for(lambda event: event.get("event") == "node_started")
        # Left to run until every period of the window has run (at most 30 s).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            found = window()
            if len(found) >= expected() and all(_settled(r) for r in found):
                break
            time.sleep(0.5)
    finally:
        assert final.stop() == 0
    found = window()
    assert len(found) >= expected(), "periods of the window have no row"
    unrun = [(row["period"], row["status"]) for row in found if not _settled(row)]
    assert unrun == [], f"periods of the window that never ran: {unrun}"
    given_up = [
        event
        for node in [*incarnations, final]
        for event in node.events()
        if event.get("event") == "run_given_up"
    ]
    assert given_up == []


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_a_partitioned_holder_knows_it_lost_before_anyone_retakes(
    tmp_path: Path, postgres_url: str, isolation: str
) -> None:
    """The holder's connections to the database stop passing bytes for 18 s (nothing is
    refused, nothing arrives). Before the 6 s lease can run out on the database the
    holder logs `lease_lost` and cancels its job (a child process is killed); then
    another node retakes it; after the heal the holder's late outcome is refused, once."""
    jobs = f"partitioned_{isolation}"
    proxy = Proxy(target_port=5432)
    proxy.start()
    log = tmp_path / "executions.txt"
    holder = start_node(tmp_path, "holder", proxy.url(postgres_url), jobs, EXECUTION_LOG=str(log))
    other: Node | None = None
    try:
        started = holder.wait_for(lambda event: event.get("event") == "run_started")
        other = start_node(tmp_path, "other", postgres_url, jobs, EXECUTION_LOG=str(log))
        other.wait_for(lambda event: event.get("event") == "node_started")
        pid = first_pid(log)
        proxy.freeze()
        frozen_at = time.time()
        retaken, child_gone_at = watch_takeover(other, str(started["run_id"]), pid, 20)
        time.sleep(max(0.0, frozen_at + 18 - time.time()))
        proxy.thaw()
        holder.wait_for(
            lambda e: e.get("event") == "run_outcome_refused" and e.get("attempt") == 1,
            timeout=30,
        )
        time.sleep(2)
    finally:
        proxy.thaw()
        codes = [node.stop() for node in (holder, other) if node is not None]
        proxy.cut()
    assert codes == [0, 0]
    events = holder.events()
    lost = [e for e in events if e.get("event") == "lease_lost" and e.get("attempt") == 1]
    assert lost, "the holder never logged lease_lost"
    assert when(lost[0]) < when(retaken), "lease_lost came after the takeover"
    assert [e for e in events if e.get("event") == "heartbeat_failed"], "no heartbeat_failed"
    refused = [e for e in events if e.get("event") == "run_outcome_refused"]
    assert [e["attempt"] for e in refused] == [1], "the late outcome is refused once"
    if isolation == "process":
        assert child_gone_at is not None
        assert child_gone_at < when(retaken), "the child process outlived the lease"
    else:
        mine = [w for w in notes(log) if w[2] == "1" and w[3].startswith("cancelled@")]
        assert mine, "ctx.cancelled was never set"
        assert float(mine[0][3].split("@")[1]) < when(retaken)
    # Whatever the other node ran of the job (the retaken period, or a later one that
    # the dead lease no longer held back), it began after the holder had given up.
    elsewhere = [
        float(w[3].split("@")[1])
        for w in notes(log)
        if w[1].startswith("other-") and w[3].startswith("start@")
    ]
    assert elsewhere
    assert min(elsewhere) >= when(lost[0]), "the other node ran the job while the holder did"


RENEWAL_STATEMENT = b"UPDATE scheduler_runs SET lease_expires_at"


def test_a_holder_partitioned_inside_its_renewal_does_not_block_the_takeover(
    tmp_path: Path, postgres_url: str
) -> None:
    """The partition falls in the middle of the holder's heartbeat transaction: its
    lease renewal reached the server (which now holds the run's row lock for it) and
    nothing more gets through, not even the COMMIT. The server must end that session
    within seconds, or no other node can take the run over until the network heals."""
    proxy = Proxy(target_port=5432, framed=True)
    proxy.start()
    log = tmp_path / "executions.txt"
    url = proxy.url(postgres_url)
    holder = start_node(tmp_path, "holder", url, "partitioned_thread", EXECUTION_LOG=str(log))
    other: Node | None = None
    try:
        started = holder.wait_for(lambda event: event.get("event") == "run_started")
        other = start_node(tmp_path, "other", postgres_url, "partitioned_thread")
        other.wait_for(lambda event: event.get("event") == "node_started")
        fell = proxy.freeze_after(RENEWAL_STATEMENT)
        assert fell.wait(10), "no lease renewal went through the proxy"
        frozen_at = time.time()
        retaken = other.wait_for(
            lambda e: e.get("event") == "run_retaken" and e.get("run_id") == started["run_id"],
            timeout=30,
        )
    finally:
        proxy.thaw()
        codes = [node.stop() for node in (holder, other) if node is not None]
        proxy.cut()
    assert codes == [0, 0]
    # The lease is 6 s and the server ends a session idle in its transaction after 5 s.
    assert when(retaken) - frozen_at < 12, "the takeover waited for the frozen session"
