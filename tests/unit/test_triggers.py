"""Triggers of schedules created at run time: their periods, and the one-line errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduler.errors import ScheduleDefinitionError
from scheduler.triggers import TriggerKind, parse_trigger

NOW = datetime(2026, 3, 28, 12, 0, 0, 250_000, tzinfo=UTC)


def test_an_interval_is_anchored_to_its_start_and_never_drifts() -> None:
    start = datetime(2026, 3, 28, 10, 0, tzinfo=UTC)
    trigger = parse_trigger("k", every="90m", start=start, now=NOW)
    periods = trigger.periods_between(start - timedelta(seconds=1), start + timedelta(days=2), 100)
    assert periods[:3] == [start, start + timedelta(minutes=90), start + timedelta(minutes=180)]
    # Every period is start + k·90 min, however far out: `*/90` could not say this.
    assert all((period - start) % timedelta(minutes=90) == timedelta(0) for period in periods)
    assert len(periods) == 33
    assert trigger.next_after(start + timedelta(minutes=89)) == start + timedelta(minutes=90)
    assert trigger.next_after(start + timedelta(minutes=90)) == start + timedelta(minutes=180)
    assert trigger.first_from(start + timedelta(minutes=90)) == start + timedelta(minutes=90)


def test_an_interval_starts_now_cut_to_the_second_when_no_start_is_given() -> None:
    trigger = parse_trigger("k", every=5, now=NOW)
    assert trigger.start == NOW.replace(microsecond=0)
    assert trigger.next_after(NOW) == NOW.replace(microsecond=0) + timedelta(seconds=5)


def test_a_one_off_has_one_period() -> None:
    at = NOW + timedelta(hours=1)
    trigger = parse_trigger("k", at=at.isoformat(), now=NOW)
    assert trigger.kind is TriggerKind.AT
    assert trigger.next_after(NOW) == at.replace(microsecond=0)
    assert trigger.next_after(at) is None


def test_cron_in_a_zone_across_the_spring_gap() -> None:
    trigger = parse_trigger("k", cron="30 2 * * *", timezone="Europe/Paris", now=NOW)
    # 2026-03-29 has no 02:30 in Paris: that day's period is at the gap's end (03:00 CEST).
    assert trigger.next_after(NOW) == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    last_day = parse_trigger("k", cron="0 9 L * *", now=NOW)
    assert last_day.next_after(NOW) == datetime(2026, 3, 31, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("given", "field", "words"),
    [
        ({}, "trigger", "exactly one of cron, every or at"),
        ({"cron": "* * * * *", "every": "1m"}, "trigger", "exactly one"),
        ({"cron": "61 * * * *"}, "cron", "minute field '61'"),
        ({"cron": "0 0 30 2 *"}, "cron", "never fires"),
        ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, "timezone", "Mars/Olympus"),
        ({"every": "500ms"}, "every", "at least 1s"),
        ({"every": "1.5s"}, "every", "whole seconds"),
        ({"every": "soon"}, "every", "soon"),
        ({"every": 60, "start": datetime(2026, 1, 1)}, "start", "time-zone aware"),
        ({"cron": "* * * * *", "start": NOW}, "start", "only an interval"),
        ({"at": "tomorrow"}, "at", "tomorrow"),
    ],
)
def test_bad_triggers_name_the_schedule_and_the_field(
    given: dict[str, object], field: str, words: str
) -> None:
    with pytest.raises(ScheduleDefinitionError) as raised:
        parse_trigger("tenant-42:report", now=NOW, **given)  # type: ignore[arg-type]
    assert raised.value.field == field
    assert str(raised.value).startswith(f"schedule 'tenant-42:report': {field}: ")
    assert words in str(raised.value)
    assert "\n" not in str(raised.value)
