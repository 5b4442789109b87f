"""`restart_probe` in a child process of its own (`isolation="process"`)."""

from __future__ import annotations

from scheduler import RunContext, job
from tests.acceptance.jobmods.partition_body import work


@job(cron="*/20 * * * * *", name="restart-probe", isolation="process")
def restart_probe(ctx: RunContext) -> None:
    work(ctx)
