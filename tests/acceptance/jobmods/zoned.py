"""Jobs in Stockholm time: 02:30 is missing one night a year and occurs twice on another."""

from __future__ import annotations

from scheduler import job


@job(cron="30 2 * * *", name="stockholm-0230", timezone="Europe/Stockholm")
def nightly() -> None:
    pass


@job(cron="0 * * * *", name="stockholm-hourly", timezone="Europe/Stockholm")
def hourly() -> None:
    pass
