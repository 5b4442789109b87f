"""A 7 s job every 5 s (`overlap="skip"`) that never looks at `ctx.cancelled`, beside an
every-second job: the mix that dropped sessions once made run twice."""

from __future__ import annotations

import time

from scheduler import RunContext, job
from tests.acceptance.jobmods.evidence import note


@job(cron="*/5 * * * * *", name="blunt", overlap="skip")
def blunt(ctx: RunContext) -> None:
    note(ctx, f"start@{time.time():.3f}")
    time.sleep(7)
    note(ctx, f"done@{time.time():.3f}")


@job(cron="* * * * * *", name="brisk")
def brisk(ctx: RunContext) -> None:
    note(ctx, f"start@{time.time():.3f}")
    time.sleep(0.1)
    note(ctx, f"done@{time.time():.3f}")
