"""A run marked running whose body never began makes no period skip (issue 43, found by
the soak: seed 1533078085 skipped `soak-slow` behind nothing).

A node's claim marks a period running (the claim starts it for a waiting worker), the
commit lands, and then the network falls between the node and the database before the
reply arrives: the server keeps the node's sessions (its liveness lock too), the node is
killed before it ever hears back, and the body never runs. To the database that run is
running under a live holder until its lease ends. The periods that fall due meanwhile
must not be `skipped (overlap)` behind it: nothing ran. They wait their turn, the run is
taken over when its lease ends, and every period runs, oldest first.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from scheduler.store.database import open_database
from tests.acceptance.processes import start_node
from tests.acceptance.tcp_proxy import Proxy
from tests.sql import rows

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

CLAIM_STATEMENT = b"INSERT INTO scheduler_runs"


def _executed(log: Path) -> set[datetime]:
    """The periods whose body ran, by the job's own log."""
    return {datetime.fromisoformat(line.split()[0]) for line in log.read_text().splitlines()}


def test_a_run_started_without_its_holder_hearing_of_it_makes_nothing_skip(
    tmp_path: Path, postgres_url: str
) -> None:
    log = tmp_path / "executions.txt"
    proxy = Proxy(target_port=5432, framed=True)
    proxy.start()
    partitioned = start_node(
        tmp_path,
        "partitioned",
        proxy.url(postgres_url),
        "unbegun",
        ["--liveness", "session"],
        EXECUTION_LOG=str(log),
    )
    other = None
    database = open_database(postgres_url)
    try:
        partitioned.wait_for(lambda event: event.get("event") == "run_succeeded", timeout=60)
        held = proxy.hold_reply_to(CLAIM_STATEMENT)
        assert held.wait(10), "no claim went through the proxy"
        partitioned.kill()
        fell_at = datetime.now(UTC)
        unbegun = [
            row
            for row in rows(database, "scheduler_runs", status="running")
            if row["period"] not in _executed(log)
        ]
        assert unbegun, "the claim that was held did not start its run"
        other = start_node(tmp_path, "other", postgres_url, "unbegun", EXECUTION_LOG=str(log))
        # The lease runs out, the run is taken over and run, and its successors after it.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(
            row["period"] in _executed(log) for row in unbegun
        ):
            time.sleep(0.5)
        time.sleep(3)
    finally:
        if other is not None:
            assert other.stop() == 0
        proxy.cut()
    try:
        runs = rows(database, "scheduler_runs", job="tick")
    finally:
        database.dispose()
    executed = _executed(log)
    assert all(row["period"] in executed for row in unbegun), "the unbegun run never ran"
    skipped = sorted(
        f"{row['period']:%H:%M:%S}"
        for row in runs
        if row["reason"] == "overlap" and row["period"] >= fell_at.replace(microsecond=0)
    )
    assert skipped == [], f"skipped behind a run that never began: {skipped}"
