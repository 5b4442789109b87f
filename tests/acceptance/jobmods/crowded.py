"""An every-second job that takes a little over a second, run side by side (`allow`):
on a node with one worker, each period waits for that worker, so its start is a start
statement of its own rather than part of its claim."""

from __future__ import annotations

import time
from os import environ
from pathlib import Path

from scheduler import RunContext, job


@job(cron="* * * * * *", name="tick", overlap="allow")
def tick(ctx: RunContext) -> None:
    time.sleep(1.05)
    with Path(environ["EXECUTION_LOG"]).open("a") as log:
        log.write(f"{ctx.period.isoformat()} {ctx.node} {ctx.attempt}\n")
