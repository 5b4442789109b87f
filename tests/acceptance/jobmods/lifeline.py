"""A job in a child process that keeps working for a minute, writing a line every 0.1 s,
so that a test can see whether the child outlives the node that started it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from scheduler import RunContext, job


@job(cron="* * * * * *", name="child-worker", isolation="process", lease="3s")
def child_worker(ctx: RunContext) -> None:
    log = Path(os.environ["EXECUTION_LOG"])
    for _ in range(600):
        with log.open("a") as out:
            out.write(f"{ctx.period.isoformat()} {os.getpid()} {time.time():.3f}\n")
        time.sleep(0.1)
