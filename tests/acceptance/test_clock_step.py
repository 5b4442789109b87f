"""The host clock of a node steps (NTP after a VM resume, an operator's `date -s`): the
node keeps scheduling by the database clock, claims nothing that has not come yet by
that clock, and says its clock is off.

The step comes from libfaketime (Debian's `faketime`), which moves this process's wall
clock at run time and leaves its monotonic clock alone, as a real clock step does."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from scheduler.states import Reason, RunStatus
from tests.acceptance.processes import start_node
from tests.acceptance.records import missing_seconds, run_rows

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
LIBFAKETIME = next(iter(sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))), None)


def _stepped_clock(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    if LIBFAKETIME is None:
        pytest.fail("libfaketime is missing: run scripts/test (it installs faketime)")
    offset = tmp_path / "clock-offset"
    offset.write_text("+0\n")
    return offset, {
        "LD_PRELOAD": str(LIBFAKETIME),
        "FAKETIME_TIMESTAMP_FILE": str(offset),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def _succeeded_after(event: dict[str, object], moment: datetime) -> bool:
    """The every-second job succeeded for a period at or after `moment`."""
    period = event.get("period")
    return (
        event.get("event") == "run_succeeded"
        and event.get("job") == "every-second"
        and isinstance(period, str)
        and datetime.fromisoformat(period) >= moment
    )


def test_a_clock_stepped_an_hour_ahead_claims_nothing_early(
    tmp_path: Path, postgres_url: str
) -> None:
    offset, faked = _stepped_clock(tmp_path)
    log = tmp_path / "executions.txt"
    node = start_node(
        tmp_path, "stepped", postgres_url, "clockwise", EXECUTION_LOG=str(log), **faked
    )
    try:
        node.wait_for(lambda event: event.get("event") == "run_succeeded")
        time.sleep(1.5)  # past the node's first clock reading: the step lands between two
        offset.write_text("+1h\n")
        stepped_at = datetime.now(UTC)
        node.wait_for(lambda event: event.get("event") == "clock_skew", timeout=20)
        # Four runs past the step, however slowly a loaded machine runs the node (under
        # libfaketime a thread waiting for a busy one gets its turn after 0.3 to 0.6 s,
        # not 5 ms, so a run can outlast its second and the next period is skipped for
        # overlap): a node that stopped claiming fails here, and shows its log.
        node.wait_for(lambda event: _succeeded_after(event, stepped_at), timeout=60, count=4)
        with psycopg.connect(postgres_url) as connection:
            (database_now,) = connection.execute("SELECT now()").fetchone() or (None,)
    finally:
        assert node.stop() == 0
    assert isinstance(database_now, datetime)
    ahead = database_now + timedelta(seconds=2)
    for job in ("every-second", "hourly"):
        early = [row["period"] for row in run_rows(postgres_url, job) if row["period"] > ahead]
        assert early == [], f"{job}: periods claimed or skipped before their time: {early[:3]}"
    rows = [row for row in run_rows(postgres_url, "every-second") if row["period"] > stepped_at]
    assert len(rows) >= 4, "the every-second job stopped after the step"
    assert missing_seconds([row["period"] for row in rows]) == []
    # Under libfaketime on a loaded machine a run can outlast its second, and the next
    # period is then skipped for overlap (the job's default): recorded, on time, by rule.
    # Any other outcome (failed, missed, a skip for another reason) is a fault.
    outcomes = [
        (row["status"], row["reason"]) for row in rows if row["status"] != RunStatus.SUCCEEDED
    ]
    assert all(outcome == (RunStatus.SKIPPED, Reason.OVERLAP) for outcome in outcomes), outcomes
    assert sum(row["status"] == RunStatus.SUCCEEDED for row in rows) >= 4
    skew = next(event for event in node.events() if event.get("event") == "clock_skew")
    assert 3590 <= abs(float(skew["offset_s"])) <= 3610


@pytest.mark.parametrize("offset_s", [-120, 120])
def test_a_node_started_with_its_clock_off_claims_from_the_database_clock(
    tmp_path: Path, postgres_url: str, offset_s: int
) -> None:
    """The node's first periods are the database clock's, whichever way its host clock
    is off when it starts: behind, it does not fire the periods between its clock and
    the database's at once (a burst of past periods as live ones); ahead, it does not
    leave the periods until its own clock to a later catch-up."""
    if LIBFAKETIME is None:
        pytest.fail("libfaketime is missing: run scripts/test (it installs faketime)")
    faked = {
        "LD_PRELOAD": str(LIBFAKETIME),
        "FAKETIME": f"{offset_s:+d}",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
    log = tmp_path / "executions.txt"
    with psycopg.connect(postgres_url) as connection:
        (started,) = connection.execute("SELECT now()").fetchone() or (None,)
    assert isinstance(started, datetime)
    node = start_node(tmp_path, "off", postgres_url, "clockwise", EXECUTION_LOG=str(log), **faked)
    try:
        node.wait_for(lambda event: event.get("event") == "node_started")
        node.wait_for(lambda event: _succeeded_after(event, started), timeout=60, count=4)
    finally:
        assert node.stop() == 0
    skew = next(event for event in node.events() if event.get("event") == "clock_skew")
    assert abs(abs(float(skew["offset_s"])) - abs(offset_s)) <= 5
    rows = run_rows(postgres_url, "every-second")
    early = [row["period"] for row in rows if row["period"] < started - timedelta(seconds=1)]
    assert early == [], f"periods before the node started were fired: {early[:3]} ..."
    late = [
        (row["period"], row["claimed_at"])
        for row in rows
        if row["claimed_at"] - row["period"] > timedelta(seconds=5)
    ]
    assert late == [], f"periods claimed late: {late[:3]}"
    assert missing_seconds([row["period"] for row in rows]) == []
