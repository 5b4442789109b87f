"""Durations as users write them: seconds, a timedelta, or "30s" / "5m" / "1h" / "1d"."""

from __future__ import annotations

import re
from datetime import timedelta

Duration = int | float | timedelta | str

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_ZERO = timedelta(0)
_TERM = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def parse_duration(value: Duration) -> timedelta:
    """Turn any accepted spelling into a timedelta; raise ValueError with the bad value."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration, got {value!r}")  # noqa: TRY004 - one error type for callers
    if isinstance(value, timedelta):  # already one (every default): kept as it is
        if value < _ZERO:
            raise ValueError(f"duration must not be negative, got {value!r}")
        return value
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _parse_text(value)
    else:
        raise ValueError(f"expected a duration, got {value!r}")  # noqa: TRY004
    if seconds < 0:
        raise ValueError(f"duration must not be negative, got {value!r}")
    return timedelta(seconds=seconds)


def _parse_text(text: str) -> float:
    """Accept "90", "1.5s", "5m", "1h30m"; reject anything else, including "" and "5 min"."""
    compact = text.strip().lower()
    try:
        return float(compact)
    except ValueError:
        pass
    position, total = 0, 0.0
    for match in _TERM.finditer(compact):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if position == 0 or position != len(compact):
        raise ValueError(f"cannot read {text!r} as a duration (use seconds or 30s, 5m, 1h, 1d)")
    return total


def format_duration(value: timedelta) -> str:
    """The shortest exact spelling, for logs and `scheduler jobs`."""
    seconds = value.total_seconds()
    for unit in ("d", "h", "m"):
        size = _UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
