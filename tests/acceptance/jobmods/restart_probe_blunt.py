"""`restart_probe` with a body that never looks at `ctx.cancelled`."""

from __future__ import annotations

import os
import time

from scheduler import RunContext, job
from tests.acceptance.jobmods.evidence import note
from tests.acceptance.jobmods.partition_body import body_seconds


@job(cron="*/20 * * * * *", name="restart-probe")
def restart_probe(ctx: RunContext) -> None:
    note(ctx, f"pid={os.getpid()}")
    note(ctx, f"start@{time.time():.3f}")
    time.sleep(body_seconds())
    note(ctx, f"done@{time.time():.3f}")
