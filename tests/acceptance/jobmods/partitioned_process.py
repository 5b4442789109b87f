"""A long job in a child process, with a 6 s lease, watching `ctx.cancelled` (partitions)."""

from __future__ import annotations

from scheduler import RunContext, job
from tests.acceptance.jobmods.partition_body import work


@job(cron="* * * * * *", name="partitioned", lease="6s", isolation="process")
def partitioned(ctx: RunContext) -> None:
    work(ctx)
