"""A thread job that outlives its one-second timeout once: its first call ignores
`ctx.cancelled` and runs until the file OVERRUN_RELEASE exists; every later call returns
at once. Each call is noted in EXECUTION_LOG."""

from __future__ import annotations

import os
import time
from pathlib import Path

from scheduler import RunContext, job
from tests.acceptance.jobmods.evidence import note


@job(cron="* * * * * *", name="overrun", timeout="1s")
def overrun(ctx: RunContext) -> None:
    note(ctx, "start")
    release = Path(os.environ["OVERRUN_RELEASE"])
    lingered = release.with_suffix(".lingered")
    if lingered.exists():
        return
    lingered.touch()
    deadline = time.monotonic() + 60
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    note(ctx, "returned")
