"""A job every 10 s whose first attempt fails and is retried an hour later; its 6 s
lease makes a node that runs it beat every 2 s."""

from __future__ import annotations

from scheduler import RunContext, job
from tests.acceptance.jobmods.evidence import note


@job(
    cron="*/10 * * * * *",
    name="retry-later",
    retries=1,
    retry_backoff="1h",
    lease="6s",
    overlap="allow",
)
def retry_later(ctx: RunContext) -> None:
    note(ctx, "attempt")
    if ctx.attempt == 1:
        raise ValueError("the first attempt fails")
