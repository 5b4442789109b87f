"""When a given-up function is said to be an orphan: once, at the moment a takeover may
begin if it still runs then, or on its return if it returned after its lease may have
ended (a frozen node thawed); never for one that stopped in time."""

from __future__ import annotations

import io
import json
import time

import structlog

from scheduler.run import orphans
from tests.log_capture import configured
from tests.waiting import wait_until


def _said(out: io.StringIO) -> list[str]:
    return [json.loads(line)["event"] for line in out.getvalue().splitlines()]


def test_a_body_still_running_at_the_grace_is_said_once_with_its_overlap() -> None:
    out = io.StringIO()
    with configured(out):
        orphan = orphans.Orphan(structlog.get_logger(), "liveness", grace=0.05)
        orphans.watch(orphan, lambda: True)
        wait_until(lambda: orphan.orphaned_at is not None)
        orphan.check(lambda: True)  # a second look says nothing more
        time.sleep(0.05)
        orphan.returned(past_lease=True)
    assert _said(out) == ["run_orphaned", "run_orphan_returned"]
    returned = json.loads(out.getvalue().splitlines()[-1])
    assert returned["overlap_s"] >= 0.05


def test_a_body_that_stopped_in_time_is_no_orphan() -> None:
    out = io.StringIO()
    with configured(out):
        orphan = orphans.Orphan(structlog.get_logger(), "lease", grace=0.05)
        orphan.returned(past_lease=False)
        orphans.watch(orphan, lambda: False)
        time.sleep(0.15)
    assert _said(out) == []


def test_a_body_returning_past_its_lease_before_the_look_is_said_on_return() -> None:
    """The freeze race: told and returned in the same instant the node thawed, long
    after its lease may have ended."""
    out = io.StringIO()
    with configured(out):
        orphan = orphans.Orphan(structlog.get_logger(), "lease", grace=10.0)
        orphan.returned(past_lease=True)
        orphans.returned_late(structlog.get_logger())
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [e["event"] for e in events] == ["run_orphaned", "run_orphan_returned", "run_orphaned"]
    assert events[-1]["cause"] == "frozen"
