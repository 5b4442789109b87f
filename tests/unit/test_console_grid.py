"""The console's grid and chart as data: order, upcoming periods, filters, bars."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduler.console.grid import UPCOMING, duration_bars, grid_row, matches, utc
from scheduler.model import JobRow
from scheduler.store.overview import Cell

NOW = datetime(2026, 12, 1, 12, 0, 30, tzinfo=UTC)


def job(name: str = "billing", cron: str = "* * * * *", *, paused: bool = False) -> JobRow:
    return JobRow(name, cron, "UTC", NOW, NOW, paused, None, 30.0, None, 0, 30.0)


def cell(minute: int, status: str, duration_ms: int | None = 10, attempt: int = 1) -> Cell:
    period = NOW.replace(second=0) - timedelta(minutes=minute)
    return Cell("billing", period, f"id{minute}", status, None, attempt, "schedule", duration_ms)


def test_a_row_is_its_periods_oldest_first_then_the_next_ones() -> None:
    row = grid_row(job(), [cell(2, "succeeded"), cell(1, "failed", attempt=2)], NOW, ahead=2)
    assert [view.status for view in row.cells] == ["succeeded", "failed", UPCOMING, UPCOMING]
    assert row.cells[1].href == "/runs/id1"
    assert row.cells[1].title == "2026-12-01T11:59:00Z failed, attempt 2"
    assert row.cells[2].href is None
    assert row.cells[2].title == "2026-12-01T12:01:00Z upcoming"
    assert row.next_period == datetime(2026, 12, 1, 12, 1, tzinfo=UTC)


def test_a_schedule_this_version_cannot_read_shows_its_history_and_no_upcoming_cell() -> None:
    ended = grid_row(job(cron="not a cron"), [cell(1, "missed")], NOW, ahead=2)
    assert [view.status for view in ended.cells] == ["missed"]
    assert ended.next_period is None


def test_filters_by_part_of_the_name_and_by_recent_statuses() -> None:
    cells = [cell(2, "succeeded"), cell(1, "skipped")]
    assert matches(job("nightly-Billing"), cells, "billing", [])
    assert not matches(job("cleanup"), cells, "billing", [])
    assert matches(job(), cells, "", ["failed", "skipped"])
    assert not matches(job(), cells, "", ["failed"])
    assert matches(job(paused=True), cells, "", ["paused"])
    assert not matches(job(), cells, "", ["paused"])


def test_duration_bars_are_scaled_to_the_longest_run() -> None:
    bars = duration_bars(
        [cell(3, "succeeded", 50), cell(2, "skipped", None), cell(1, "failed", 100)], 100, 80
    )
    assert [(bar.status, bar.height, bar.y) for bar in bars] == [
        ("succeeded", 40, 40),
        ("failed", 80, 0),
    ]
    assert bars[1].x == bars[0].width + 1
    assert duration_bars([cell(1, "missed", None)], 100, 80) == []


def test_instants_are_utc_with_a_z_and_a_manual_run_keeps_its_fraction() -> None:
    assert utc(NOW) == "2026-12-01T12:00:30Z"
    assert utc(NOW.replace(microsecond=1)) == "2026-12-01T12:00:30.000001Z"
    assert utc(None) == "-"


def test_the_cell_markup_escapes_every_attribute() -> None:
    hostile = Cell("j", NOW, 'x"><script>1</script>', "fail<ed", "a&b", 1, "schedule", 1)
    row = grid_row(job(), [hostile], NOW, ahead=1)
    html = str(row.strip)
    assert "<script>" not in html
    assert 'href="/runs/x&quot;&gt;&lt;script&gt;1&lt;/script&gt;"' in html
    assert 'class="c s-fail&lt;ed"' in html
    assert "fail&lt;ed (a&amp;b)" in html
    assert html.endswith('title="2026-12-01T12:01:00Z upcoming"></i>')
