"""A job whose first attempt fails and is retried a second later."""

from __future__ import annotations

from scheduler import RunContext, job
from tests.acceptance.jobmods.evidence import note


@job(cron="*/10 * * * * *", name="retry-soon", retries=1, retry_backoff="1s", overlap="allow")
def retry_soon(ctx: RunContext) -> None:
    note(ctx, "attempt")
    if ctx.attempt == 1:
        raise ValueError("the first attempt fails")
