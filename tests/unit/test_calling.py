"""A job's function sees its run's fields bound for its log lines, and nothing bound
during the call (ours or the job's) is left on the worker thread for the next run."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import structlog
from structlog.contextvars import bind_contextvars, get_contextvars, unbind_contextvars

from scheduler.registry import job
from scheduler.run.calling import call
from scheduler.run.context import RunContext
from scheduler.states import Origin, RunStatus

PERIOD = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def _context(name: str, attempt: int) -> RunContext:
    return RunContext(
        name, PERIOD, f"run-{attempt}", attempt, "node-1", Origin.SCHEDULE, structlog.get_logger()
    )


def test_the_run_fields_are_bound_during_the_call_only() -> None:
    seen: list[dict[str, Any]] = []

    @job("* * * * *", name="bound")
    def bound() -> None:
        seen.append(get_contextvars())
        bind_contextvars(customer=42)  # the job's own binding

    bind_contextvars(outer="kept")  # what the worker had before (a trace, say)
    try:
        first = call(bound, _context("bound", 1))
        second = call(bound, _context("bound", 2))
        after = get_contextvars()
    finally:
        unbind_contextvars("outer")
    assert first.status is second.status is RunStatus.SUCCEEDED
    assert seen[0] == {
        "outer": "kept",
        "job": "bound",
        "period": PERIOD.isoformat(),
        "run_id": "run-1",
        "attempt": 1,
        "node": "node-1",
    }
    assert seen[1]["run_id"] == "run-2"
    assert "customer" not in seen[1], "the first run's binding reached the second"
    assert after == {"outer": "kept"}


def test_a_failing_job_is_an_outcome_and_leaves_nothing_bound() -> None:
    @job("* * * * *", name="broken")
    def broken() -> None:
        bind_contextvars(step="charging")
        raise ValueError("card declined")

    outcome = call(broken, _context("broken", 1))
    assert outcome.status is RunStatus.FAILED
    assert outcome.failure is not None
    assert "card declined" in outcome.failure.message
    assert get_contextvars() == {}
