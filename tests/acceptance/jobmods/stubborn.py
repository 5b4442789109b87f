"""A thread job that outlives its timeout and ignores `ctx.cancelled`: a retry must wait
until the timed-out attempt has really stopped."""

from __future__ import annotations

import threading

from scheduler import RunContext, job
from tests.acceptance.jobmods.evidence import note


@job(cron="0 0 1 1 *", name="stubborn", timeout="1s", retries=1, retry_backoff="0s")
def stubborn(ctx: RunContext) -> None:
    note(ctx, "start")
    threading.Event().wait(3)  # deaf to ctx.cancelled
    note(ctx, "done")
