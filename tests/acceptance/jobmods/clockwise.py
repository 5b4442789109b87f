"""An every-second job and an hourly one, for clock-step tests. The bodies do not call
`time.sleep` (libfaketime's clock_nanosleep breaks it when the monotonic clock is left
alone); they only write what ran."""

from __future__ import annotations

import os
from pathlib import Path

from scheduler import RunContext, job


def _note(ctx: RunContext) -> None:
    with Path(os.environ["EXECUTION_LOG"]).open("a") as log:
        log.write(f"{ctx.period.isoformat()} {ctx.job}\n")


@job(cron="* * * * * *", name="every-second")
def every_second(ctx: RunContext) -> None:
    _note(ctx)


@job(cron="0 * * * *", name="hourly")
def hourly(ctx: RunContext) -> None:
    _note(ctx)
