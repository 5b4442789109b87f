"""A job that runs every second for SLEEP_SECONDS and records when it finishes."""

from __future__ import annotations

import os
import time
from pathlib import Path

from scheduler import RunContext, job


@job(cron="* * * * * *", name="sleeper")
def sleeper(ctx: RunContext) -> None:
    time.sleep(float(os.environ.get("SLEEP_SECONDS", "3")))
    with Path(os.environ["EXECUTION_LOG"]).open("a") as log:
        log.write(f"{ctx.period.isoformat()} {ctx.node} done\n")
