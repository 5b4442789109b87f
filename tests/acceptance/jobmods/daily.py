"""A daily job that takes three seconds, for `run-once` races."""

from __future__ import annotations

import time

from scheduler import RunContext, job
from tests.acceptance.jobmods.evidence import note


@job(cron="0 0 * * *", name="daily-report")
def daily_report(ctx: RunContext) -> None:
    note(ctx, "start")
    time.sleep(3)
    note(ctx, "done")
