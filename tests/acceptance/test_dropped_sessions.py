"""A dropped database session is not a death (issue 41, items 1 and 2).

Sessions end for many reasons while a node lives: a database restart, a failover,
`pg_terminate_backend`, a proxy. A holder whose session ended keeps every run whose
lease is still valid; its peers take it for dead only on unambiguous evidence (its
lock vanished while they themselves stayed connected, and it did not come back). A
holder cut off alone, which cannot tell, stops its own runs before its peers may act.

Every test here restarts or terminates sessions on a throwaway server of its own.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.processes import Node, first_event, start_node, watch_takeover, when
from tests.acceptance.records import first_pid, first_seen, notes, run_rows
from tests.acceptance.tcp_proxy import Proxy
from tests.postgres_cluster import Cluster

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def _events(nodes: list[Node], name: str) -> list[dict[str, Any]]:
    return [event for node in nodes for event in node.events() if event.get("event") == name]


def _started(event: dict[str, Any]) -> bool:
    return event.get("event") == "run_started"


def _ended(run_id: str) -> Callable[[dict[str, Any]], bool]:
    outcomes = {"run_succeeded", "run_failed", "run_timed_out", "run_outcome_refused"}
    return lambda event: event.get("event") in outcomes and event.get("run_id") == run_id


def _wait_started(nodes: list[Node]) -> None:
    for node in nodes:
        node.wait_for(lambda event: event.get("event") == "node_started")


def _probe_cron(lead: float = 5.0) -> str:
    """`PROBE_CRON`: the restart probe every 20 s as before, its first period `lead`
    seconds from now (enough for the nodes to start and register it) rather than at the
    next multiple of 20 s, up to 20 s away. A node that starts later still runs the
    period 20 s on."""
    first = int(time.time() + lead) % 20
    return f"{first},{first + 20},{first + 40} * * * * *"


# How long a test waits for the probe's first run: its first period `lead` seconds
# after the nodes were started, or (nodes slower than that) the one 20 s later.
FIRST_RUN_S = 40


def _period_notes(log: Path, period: str) -> list[list[str]]:
    return [words for words in notes(log) if words[0] == period]


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_a_database_restart_costs_a_running_job_nothing(
    tmp_path: Path, cluster: Cluster, mode: str
) -> None:
    """Three nodes; a 12 s job that honours `ctx.cancelled`, default 30 s lease. The
    server is stopped 3 s into a run, left down 5 s and started again. The run goes on
    through it: not cancelled, not retaken, recorded succeeded as attempt 1."""
    log = tmp_path / "executions.txt"
    env = {"EXECUTION_LOG": str(log), "BODY_SECONDS": "12", "PROBE_CRON": _probe_cron()}
    nodes = [
        start_node(tmp_path, f"node{n}", cluster.url, "restart_probe", **env) for n in range(3)
    ]
    try:
        _wait_started(nodes)
        holder, started = first_event(nodes, _started, timeout=FIRST_RUN_S)
        time.sleep(3)
        cluster.restart(down_for=5, mode=mode)
        holder.wait_for(_ended(str(started["run_id"])), timeout=60)
        time.sleep(2)
    finally:
        codes = [node.stop() for node in nodes]
    assert codes == [0, 0, 0]
    assert _events(nodes, "liveness_lost"), "the restart never ended a liveness session"
    assert _events(nodes, "lease_lost") == [], "a run was given up though its lease was valid"
    assert _events(nodes, "nodes_lost") == [], "a live node was taken for dead"
    period_notes = _period_notes(log, str(started["period"]))
    cancelled = [w for w in period_notes if w[3].startswith("cancelled@")]
    assert cancelled == [], "the body was cancelled"
    assert len([w for w in period_notes if w[3].startswith("start@")]) == 1, period_notes
    assert len([w for w in period_notes if w[3].startswith("done@")]) == 1, period_notes
    row = next(r for r in run_rows(cluster.url, "restart-probe") if r["id"] == started["run_id"])
    assert (row["status"], row["attempt"]) == ("succeeded", 1)


def test_dropped_sessions_run_no_body_twice(tmp_path: Path, cluster: Cluster) -> None:
    """Three nodes; an every-second 100 ms job and a 7 s job every 5 s (skip) that never
    looks at `ctx.cancelled`. Every 4 s for 36 s every backend of the scheduler's
    database is terminated. No period's body runs twice, no live node is taken for dead,
    and every period of the every-second job in the window ran."""
    log = tmp_path / "executions.txt"
    nodes = [
        start_node(tmp_path, f"node{n}", cluster.url, "blunt", EXECUTION_LOG=str(log))
        for n in range(3)
    ]
    terminated = 0
    try:
        _wait_started(nodes)
        time.sleep(3)
        began = datetime.now(UTC)
        for _ in range(9):
            time.sleep(4)
            terminated += cluster.terminate_all()
        ended = datetime.now(UTC)
        # The last round is watched longer than any round before it was until the next
        # (4 s); then until every period of the every-second job in the window has its
        # outcome (the test slept 12 s for that; the assertions judge after the wait).
        time.sleep(LAST_ROUND_WATCHED_S)
        _wait_window_settled(cluster.url, began, ended, timeout=SETTLE_S)
    finally:
        codes = [node.stop() for node in nodes]
    assert codes == [0, 0, 0]
    assert terminated >= 9 * 6, f"only {terminated} sessions were terminated"
    starts = Counter((words[4], words[0]) for words in notes(log) if words[3].startswith("start@"))
    twice = {key: count for key, count in starts.items() if count > 1}
    assert twice == {}, f"bodies that ran more than once: {twice}"
    assert _events(nodes, "nodes_lost") == [], "a live node was taken for dead"
    assert _events(nodes, "lease_lost") == [], "a run was given up though its lease was valid"
    start = max(began, first_seen(cluster.url, "brisk")) + timedelta(seconds=1)
    window = [r for r in run_rows(cluster.url, "brisk") if start <= r["period"] <= ended]
    assert len(window) >= int((ended - start).total_seconds())
    unrun = [(r["period"], r["status"], r["reason"]) for r in window if r["status"] != "succeeded"]
    assert unrun == [], f"periods of the every-second job that did not run: {unrun}"


LAST_ROUND_WATCHED_S = 5
SETTLE_S = 30


def _wait_window_settled(url: str, began: datetime, ended: datetime, timeout: float) -> None:
    """Until every period of `brisk` from a second after the later of `began` and its
    first registration up to `ended` has a row that succeeded, or `timeout` seconds."""
    deadline = time.monotonic() + timeout
    start = max(began, first_seen(url, "brisk")) + timedelta(seconds=1)
    while time.monotonic() < deadline:
        window = [r for r in run_rows(url, "brisk") if start <= r["period"] <= ended]
        if len(window) >= int((ended - start).total_seconds()) and all(
            r["status"] == "succeeded" for r in window
        ):
            return
        time.sleep(0.25)


@pytest.mark.parametrize("which", ["liveness", "every"])
def test_a_live_node_whose_sessions_end_is_not_taken_for_dead(
    tmp_path: Path, cluster: Cluster, which: str
) -> None:
    """The false positive of fast failure detection: a DBA terminates the holder's
    liveness session (or every session of the holder) while its peer stays connected.
    The holder takes a new lock and keeps its run; the peer, which saw the old lock
    vanish, does not end its leases: no cancellation, no retake, attempt 1 succeeds."""
    log = tmp_path / "executions.txt"
    env = {"EXECUTION_LOG": str(log), "BODY_SECONDS": "12", "PROBE_CRON": _probe_cron()}
    nodes = [start_node(tmp_path, f"node{n}", cluster.url, "restart_probe", **env) for n in (0, 1)]
    try:
        _wait_started(nodes)
        holder, started = first_event(nodes, _started, timeout=FIRST_RUN_S)
        time.sleep(2)
        pattern = (
            f"scheduler {holder.name} liveness"
            if which == "liveness"
            else (f"scheduler {holder.name}%")
        )
        assert cluster.terminate_all(application_name=pattern) >= 1
        holder.wait_for(lambda e: e.get("event") == "liveness_restored", timeout=10)
        holder.wait_for(_ended(str(started["run_id"])), timeout=40)
    finally:
        codes = [node.stop() for node in nodes]
    assert codes == [0, 0]
    assert _events(nodes, "nodes_lost") == [], "a live node was taken for dead"
    assert _events(nodes, "lease_lost") == []
    assert _events(nodes, "run_retaken") == []
    period_notes = _period_notes(log, str(started["period"]))
    assert [w for w in period_notes if w[3].startswith("cancelled@")] == []
    row = next(r for r in run_rows(cluster.url, "restart-probe") if r["id"] == started["run_id"])
    assert (row["status"], row["attempt"]) == ("succeeded", 1)


JOBS = {
    "thread": "restart_probe",
    "process": "restart_probe_process",
    "ignores-cancel": "restart_probe_blunt",
}


@pytest.mark.parametrize("isolation", list(JOBS))
def test_a_holder_cut_off_alone_stops_its_run_before_the_fast_takeover(
    tmp_path: Path, cluster: Cluster, isolation: str
) -> None:
    """The holder reaches the server through a proxy that closes its connections and
    refuses new ones (its sessions end on the server; its peer stays connected). The
    peer takes the run over in seconds, not a lease; the holder has cancelled its body
    (or killed its child) before that, and its late outcome is refused. A thread body
    that ignores `ctx.cancelled` is the one window left: it runs beside the takeover,
    and its node says so once (`run_orphaned`) and how long it overlapped."""
    jobs = JOBS[isolation]
    log = tmp_path / "executions.txt"
    # Only the first body is long: the test ends once the peer's retaken attempt began,
    # and need not wait for it or a later period to run a long body out. The body that
    # ignores `ctx.cancelled` ends once the test, having seen the takeover and the holder
    # connected again, creates the release file (at the latest after its 25 s).
    release = tmp_path / "release"
    env = {
        "EXECUTION_LOG": str(log),
        "BODY_SECONDS": "25",
        "LATER_BODY_SECONDS": "1",
        "PROBE_CRON": _probe_cron(),
        "BODY_RELEASE": str(release),
    }
    proxy = Proxy(target_port=cluster.port)
    proxy.start()
    holder = start_node(
        tmp_path, "holder", proxy.url(cluster.url), jobs, ["--liveness", "session"], **env
    )
    other: Node | None = None
    try:
        started = holder.wait_for(_started, timeout=FIRST_RUN_S)
        other = start_node(tmp_path, "other", cluster.url, jobs, **env)
        _wait_started([other])
        time.sleep(2)  # the other node's own lock is older than the holder's run now
        pid = first_pid(log)
        proxy.cut()
        cut_at = time.time()
        retaken, child_gone_at = watch_takeover(other, str(started["run_id"]), pid, 40)
        time.sleep(3)
        proxy.start()
        if isolation == "ignores-cancel":
            # Its body still runs while the holder is connected again and its loops (a
            # second apart) pass twice more: any of them that said the orphan again would.
            holder.wait_for(
                lambda e: e.get("event") == "liveness_restored" and when(e) > cut_at, timeout=40
            )
            time.sleep(2)
            release.touch()
        # Its late outcome is refused (the takeover came first) or, if its give-back
        # landed first, was recorded abandoned: either way not the period's outcome.
        holder.wait_for(
            lambda e: (
                e.get("event") in ("run_outcome_refused", "run_abandoned") and e.get("attempt") == 1
            ),
            timeout=40,
        )
    finally:
        codes = [node.stop() for node in (holder, other) if node is not None]
        proxy.cut()
    assert codes == [0, 0]
    assert when(retaken) - cut_at < 5, "the takeover waited for the lease"
    lost = [e for e in holder.events() if e.get("event") == "lease_lost"]
    assert lost, "the holder never gave its run up"
    assert when(lost[0]) < when(retaken), "lease_lost came after the takeover"
    orphaned = [e for e in holder.events() if e.get("event") == "run_orphaned"]
    if isolation == "ignores-cancel":
        assert [(e["attempt"], e["cause"]) for e in orphaned] == [(1, "liveness")]
        assert when(orphaned[0]) <= when(retaken) + 0.5, "said after the takeover began"
        returned = [e for e in holder.events() if e.get("event") == "run_orphan_returned"]
        assert len(returned) == 1
        assert returned[0]["overlap_s"] > 0
        return
    assert orphaned == [], "a body that stops when told, or a child, is no orphan"
    if isolation == "process":
        assert child_gone_at is not None
        assert child_gone_at < when(retaken), "the child process outlived the takeover"
    else:
        period_notes = _period_notes(log, str(started["period"]))
        cancelled = [w for w in period_notes if w[2] == "1" and w[3].startswith("cancelled@")]
        assert cancelled, "ctx.cancelled was never set"
        assert float(cancelled[0][3].split("@")[1]) < when(retaken)
