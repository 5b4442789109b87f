"""One daily job whose next period is an hour after this module is loaded: a node that
runs only it has nothing to do meanwhile, and its main loop sleeps the hour through."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduler import job

_IN_AN_HOUR = datetime.now(UTC) + timedelta(hours=1)


@job(cron=f"{_IN_AN_HOUR.minute} {_IN_AN_HOUR.hour} * * *", name="distant", catchup="none")
def distant() -> None:
    """Never called while a test watches."""
