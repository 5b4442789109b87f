"""A node takes a large instant off the schedule half a second before it comes (sorts its
periods into its share and its peers', starts the threads their runs need) and still
claims, starts and runs none of them before the instant: two replicas, 150 jobs due
together every five seconds, each period run exactly once."""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from scheduler.node.daemon import PREPARE_AHEAD_S
from scheduler.states import RunStatus
from scheduler.store.database import open_database
from tests.acceptance.jobmods.crowd import CROWD
from tests.acceptance.processes import start_node
from tests.sql import rows

pytestmark = pytest.mark.slow

INSTANTS = 3
# How long after an instant its 150 runs have ended, with room for a loaded machine.
SETTLE_S = 3.0
# The loop wakes a little late on a loaded machine; never early.
LATE_WAKE = timedelta(seconds=0.4)


def _instant(event: dict[str, object]) -> tuple[datetime, datetime]:
    return datetime.fromisoformat(str(event["at"])), datetime.fromisoformat(str(event["timestamp"]))


def test_a_large_instant_is_prepared_ahead_and_claimed_at_its_time(
    tmp_path: Path, postgres_url: str
) -> None:
    executions = tmp_path / "executions.log"
    nodes = [
        start_node(
            tmp_path,
            f"n{number}",
            postgres_url,
            "crowd",
            ["--log-level", "debug"],
            EXECUTION_LOG=str(executions),
        )
        for number in range(2)
    ]
    try:
        for node in nodes:
            node.wait_for(lambda event: event.get("event") == "node_started")
        for node in nodes:
            node.wait_for(
                lambda event: event.get("event") == "instant_prepared", timeout=30, count=INSTANTS
            )
        # The last instant prepared comes, and its runs end.
        last = max(
            _instant(event)[0]
            for node in nodes
            for event in node.events()
            if event.get("event") == "instant_prepared"
        )
        time.sleep(max(0.0, last.timestamp() + SETTLE_S - time.time()))
    finally:
        for node in nodes:
            assert node.stop() == 0

    prepared: set[datetime] = set()
    for node in nodes:
        for event in node.events():
            if event.get("event") != "instant_prepared":
                continue
            at, said = _instant(event)
            assert event["periods"] == CROWD
            # Taken off ahead of the instant by the node's clock (the database's, which
            # may stand a few milliseconds off the host's), not earlier than
            # PREPARE_AHEAD_S; the line itself is written once the threads have started,
            # so its host timestamp may fall just after the instant on a loaded machine.
            assert 0 < float(str(event["ahead_s"])) <= PREPARE_AHEAD_S, event
            assert at - said <= timedelta(seconds=PREPARE_AHEAD_S) + LATE_WAKE, event
            prepared.add(at)
    assert len(prepared) >= INSTANTS

    database = open_database(postgres_url)
    try:
        runs = rows(database, "scheduler_runs", order_by="period")
    finally:
        database.dispose()
    began: Counter[tuple[str, str]] = Counter()
    for line in executions.read_text().splitlines():
        period, _node, _attempt, what, job = line.split()
        moment = float(what.removeprefix("began="))
        # No body began before its instant, by the host's clock.
        assert moment >= datetime.fromisoformat(period).timestamp(), line
        began[(job, period)] += 1
    for at in sorted(prepared):
        of_instant = [row for row in runs if row["period"] == at]
        if not of_instant:
            continue  # prepared, then the nodes were stopped before it came
        assert len(of_instant) == CROWD
        for row in of_instant:
            # Claimed and started at or after the instant, by the database's clock.
            assert row["claimed_at"] >= at, row
            if row["status"] == RunStatus.SUCCEEDED:
                assert row["started_at"] >= at, row
                assert began[(row["job"], at.isoformat())] == 1, row
    ran = [at for at in prepared if any(row["period"] == at for row in runs)]
    assert len(ran) >= INSTANTS
    assert all(count == 1 for count in began.values())
