"""Writes what a job did to the file named by EXECUTION_LOG: evidence outside the runs table."""

from __future__ import annotations

import os
from pathlib import Path

from scheduler import RunContext


def note(ctx: RunContext, what: str) -> None:
    with Path(os.environ["EXECUTION_LOG"]).open("a") as log:
        log.write(f"{ctx.period.isoformat()} {ctx.node} {ctx.attempt} {what} {ctx.job}\n")
