"""Jobs that fail: always, or only on their first attempt."""

from __future__ import annotations

from scheduler import RunContext, job
from tests.acceptance.jobmods.evidence import note


@job(cron="0 0 * * *", name="always-fails", retries=2, retry_backoff="0.5s")
def always_fails(ctx: RunContext) -> None:
    note(ctx, "attempt")
    raise RuntimeError(f"attempt {ctx.attempt} failed")


@job(cron="*/5 * * * * *", name="fails-once", retries=1, retry_backoff="0.5s", overlap="allow")
def fails_once(ctx: RunContext) -> None:
    note(ctx, "attempt")
    if ctx.attempt == 1:
        raise ValueError("first attempt always fails")
