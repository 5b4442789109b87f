"""Long jobs that checkpoint after every step and resume from the last checkpoint."""

from __future__ import annotations

import os
import time

from scheduler import RunContext, job
from tests.acceptance.jobmods.evidence import note

STEPS = 20


@job(cron="0 0 1 1 *", name="long-report", lease="3s")
def long_report(ctx: RunContext) -> None:
    """Step i takes STEP_SECONDS; the checkpoint says which step comes next."""
    begin = (ctx.last_checkpoint or {"next": 0})["next"]
    note(ctx, f"resumed-from {begin}")
    for step in range(begin, STEPS):
        note(ctx, f"step {step}")
        time.sleep(float(os.environ.get("STEP_SECONDS", "0.2")))
        ctx.checkpoint({"next": step + 1})
        note(ctx, f"checkpointed {step + 1}")


@job(cron="0 0 1 1 *", name="isolated-items", isolation="process", retries=1, retry_backoff="0s")
def isolated_items(ctx: RunContext) -> None:
    """In a child process: items and checkpoints go through the child's own engine."""
    note(ctx, f"resumed-from {ctx.last_checkpoint}")
    claimed = [key for key in ("a", "b", "c") if ctx.once(key)]
    note(ctx, f"claimed {','.join(claimed) or '-'}")
    ctx.checkpoint({"attempt": ctx.attempt, "claimed": claimed})
    if ctx.attempt == 1:
        raise RuntimeError("fail once, to be retried")
