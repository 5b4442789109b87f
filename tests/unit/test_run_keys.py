"""`ctx.key(item)`: one stable key per (job or schedule, period, item), whatever the
attempt or the node, for downstreams that deduplicate on it."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
import structlog

from scheduler.run.context import RunContext
from scheduler.states import Origin

PERIOD = datetime(2026, 12, 7, 9, tzinfo=UTC)


def _context(**changes: object) -> RunContext:
    context = RunContext(
        job="billing",
        period=PERIOD,
        run_id="r1",
        attempt=1,
        node="node-a",
        origin=Origin.SCHEDULE,
        log=structlog.get_logger("test"),
    )
    return replace(context, **changes)  # type: ignore[arg-type]


def test_the_same_for_every_attempt_and_node_of_the_period() -> None:
    first = _context().key("charge")
    assert _context(attempt=2, node="node-b", run_id="r1").key("charge") == first
    assert re.fullmatch(r"cc-[0-9a-f]{40}", first)  # fits Stripe's 255, SQS's 128


def test_different_for_any_other_period_job_schedule_or_item() -> None:
    keys = {
        _context().key("charge"),
        _context().key("refund"),
        _context(period=PERIOD + timedelta(seconds=1)).key("charge"),
        _context(job="payroll").key("charge"),
        _context(job="@tenant-1").key("charge"),
        _context(job="@tenant-2").key("charge"),
    }
    assert len(keys) == 6


def test_an_item_that_is_not_a_string_is_refused_naming_the_job() -> None:
    with pytest.raises(TypeError, match="job 'billing': key: the item must be a string"):
        _context().key(42)  # type: ignore[arg-type]
