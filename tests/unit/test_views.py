"""Formatting for people: aligned columns, short durations, one-line errors, merged attempts."""

from __future__ import annotations

from datetime import UTC, datetime

from scheduler.store.queries import AttemptRow, RunRow
from scheduler.tables import table
from scheduler.views import (
    duration_text,
    error_summary,
    iso,
    merged_attempts,
    short_time,
)

PERIOD = datetime(2026, 3, 10, 3, 0, tzinfo=UTC)


def test_times_are_utc_iso_8601_with_z() -> None:
    assert iso(datetime(2026, 3, 10, 4, 0, 0, 250000, tzinfo=UTC)) == "2026-03-10T04:00:00.250000Z"
    assert short_time("2026-03-10T04:00:00.250000Z") == "2026-03-10T04:00:00Z"
    assert short_time(None) == "-"
    assert iso(None) is None


def test_columns_line_up_under_their_headers() -> None:
    text = table(["A", "LONG HEADER", "C"], [["wide value", "x", "y"], ["v", "", "z"]])
    lines = text.splitlines()
    assert lines == [
        "A           LONG HEADER  C",
        "wide value  x            y",
        "v                        z",
    ]


def test_durations_read_at_a_glance() -> None:
    assert [duration_text(ms) for ms in (None, 0, 999, 1500, 59_940, 61_000, 3_600_000)] == [
        "-",
        "0ms",
        "999ms",
        "1.5s",
        "59.9s",
        "1m01s",
        "60m00s",
    ]


def test_an_error_fits_one_cell() -> None:
    assert error_summary(None, None) == ""
    assert (
        error_summary("billing.errors.CardDeclined", "card 42\ndetails") == "CardDeclined: card 42"
    )
    assert error_summary("builtins.KeyError", None) == "KeyError"
    long = error_summary("builtins.ValueError", "x" * 200, width=20)
    assert len(long) == 20
    assert long.endswith("…")


def _attempt(number: int, status: str) -> AttemptRow:
    return AttemptRow(number, f"node-{number}", status, None, PERIOD, PERIOD, 10, "E", "m", "tb")


def test_the_runs_row_is_the_truth_for_its_current_attempt() -> None:
    current = RunRow(
        id="r",
        job="j",
        period=PERIOD,
        status="succeeded",
        reason=None,
        origin="schedule",
        attempt=2,
        holder="node-x",
        claimed_at=PERIOD,
        started_at=PERIOD,
        finished_at=PERIOD,
        duration_ms=5,
        lease_expires_at=None,
        retry_at=None,
        error_type=None,
        error_message=None,
        error_traceback=None,
    )
    merged = merged_attempts(current, [_attempt(2, "running"), _attempt(1, "failed")])
    assert [(a.attempt, a.node, a.status) for a in merged] == [
        (1, "node-1", "failed"),
        (2, "node-x", "succeeded"),
    ]
