"""How instants are written for people: UTC, ISO-8601, with a `Z`."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_text(moment: datetime) -> str:
    """`2026-11-30T21:53:00Z` (sub-second digits kept where there are any)."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
