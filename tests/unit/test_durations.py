from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("given", "seconds"),
    [
        (30, 30),
        (1.5, 1.5),
        (timedelta(minutes=2), 120),
        ("30s", 30),
        ("5m", 300),
        ("1h", 3600),
        ("1d", 86400),
        ("1h30m", 5400),
        ("250ms", 0.25),
        ("90", 90),
        (" 2M ", 120),
    ],
)
def test_accepted_spellings(given: object, seconds: float) -> None:
    assert parse_duration(given).total_seconds() == seconds  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "given", ["", "5 min", "m5", "1x", "-5s", -1, timedelta(seconds=-1), True, None, "1h 30m"]
)
def test_refused_spellings_name_the_value(given: object) -> None:
    with pytest.raises(ValueError, match=r"duration|negative"):
        parse_duration(given)  # type: ignore[arg-type]


def test_format_is_the_shortest_exact_spelling() -> None:
    assert format_duration(timedelta(days=1)) == "1d"
    assert format_duration(timedelta(minutes=90)) == "90m"
    assert format_duration(timedelta(seconds=30)) == "30s"
    assert format_duration(timedelta(seconds=1.5)) == "1.5s"
