"""Twelve every-second jobs with a short lease (so a one-second heartbeat), each writing
one line per execution as evidence outside the runs table."""

from __future__ import annotations

import os
from pathlib import Path

from scheduler import RunContext, job

NAMES = [f"tick-{index:02d}" for index in range(12)]


def _tick(ctx: RunContext) -> None:
    with Path(os.environ["EXECUTION_LOG"]).open("a") as log:
        log.write(f"{ctx.job} {ctx.period.isoformat()} {ctx.node} {ctx.attempt}\n")


for _name in NAMES:
    globals()[_name.replace("-", "_")] = job(cron="* * * * * *", name=_name, lease="3s")(_tick)
