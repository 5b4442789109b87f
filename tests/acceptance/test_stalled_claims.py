"""A stall's backlog is not skipped behind itself (issue 41, item 3): one of two nodes
freezes inside its claim transaction (the server holds its job locks until it ends the
session), the other's claims wait; what it claimed meanwhile and did not start yet must
not make the next periods `skipped (overlap)`: only a body running when a period fell
due may. Measured on the old code: 502 periods skipped behind nothing running."""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import pytest

from scheduler.store.database import open_database
from tests.acceptance.processes import start_node
from tests.acceptance.tcp_proxy import Proxy
from tests.postgres_cluster import Cluster
from tests.sql import rows

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

CLAIM_STATEMENT = b"INSERT INTO scheduler_runs"


def _bodies(log: Path) -> dict[str, list[tuple[float, float]]]:
    """Each job's bodies, as (began, ended) instants."""
    found: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for line in log.read_text().splitlines():
        words = line.split()
        if len(words) == 5 and words[3].startswith("ran="):
            began, ended = words[3].removeprefix("ran=").split(",")
            found[words[4]].append((float(began), float(ended)))
    return found


def test_a_node_frozen_in_its_claim_leaves_no_skip_behind_nothing(
    tmp_path: Path, cluster: Cluster
) -> None:
    log = tmp_path / "executions.txt"
    proxy = Proxy(target_port=cluster.port, framed=True)
    proxy.start()
    frozen = start_node(
        tmp_path,
        "frozen",
        proxy.url(cluster.url),
        "stampede",
        ["--liveness", "session"],
        EXECUTION_LOG=str(log),
    )
    other = start_node(tmp_path, "other", cluster.url, "stampede", EXECUTION_LOG=str(log))
    try:
        for node in (frozen, other):
            node.wait_for(lambda e: e.get("event") == "node_started", timeout=60)
        time.sleep(5)
        fell = proxy.freeze_after(CLAIM_STATEMENT)
        assert fell.wait(10), "no claim went through the proxy"
        time.sleep(15)
        proxy.thaw()
        time.sleep(10)
    finally:
        proxy.thaw()
        for node in (frozen, other):
            node.stop()
        proxy.cut()
    database = open_database(cluster.url)
    try:
        skipped = rows(database, "scheduler_runs", status="skipped", reason="overlap")
    finally:
        database.dispose()
    bodies = _bodies(log)
    unjustified = [
        (row["job"], row["period"])
        for row in skipped
        if not any(began <= _instant(row["period"]) <= ended for began, ended in bodies[row["job"]])
    ]
    assert unjustified == [], f"{len(unjustified)} periods skipped behind nothing running"


def _instant(period: datetime) -> float:
    return period.timestamp()
