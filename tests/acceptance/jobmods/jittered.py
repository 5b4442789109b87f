"""A job every four seconds whose start is spread by up to two seconds of jitter."""

from __future__ import annotations

from scheduler import job


@job(cron="*/4 * * * * *", name="jittered", jitter="2s")
def jittered() -> None:
    pass
