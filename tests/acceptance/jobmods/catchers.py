"""Every-second jobs, one per catch-up policy, for downtime tests."""

from __future__ import annotations

import os
import time

from scheduler import RunContext, job
from tests.acceptance.jobmods.evidence import note


def _work(ctx: RunContext) -> None:
    time.sleep(float(os.environ.get("WORK_SECONDS", "0.05")))
    note(ctx, "done")


@job(cron="* * * * * *", name="catchup-all", catchup="all", lease="3s")
def catch_all(ctx: RunContext) -> None:
    _work(ctx)


@job(cron="* * * * * *", name="catchup-latest", catchup="latest", lease="3s")
def catch_latest(ctx: RunContext) -> None:
    _work(ctx)


@job(cron="* * * * * *", name="catchup-none", catchup="none", lease="3s")
def catch_none(ctx: RunContext) -> None:
    _work(ctx)
