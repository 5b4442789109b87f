"""An every-second job with a short lease (its takeover comes within seconds), writing
one line per execution as evidence outside the runs table."""

from __future__ import annotations

import os
import time
from pathlib import Path

from scheduler import RunContext, job


@job(cron="* * * * * *", name="tick", lease="6s")
def tick(ctx: RunContext) -> None:
    time.sleep(0.05)
    with Path(os.environ["EXECUTION_LOG"]).open("a") as log:
        log.write(f"{ctx.period.isoformat()} {ctx.node} {ctx.attempt}\n")
