"""`restart_probe` in a child process of its own (`isolation="process"`)."""

from __future__ import annotations

from scheduler import RunContext, job
from tests.acceptance.jobmods.partition_body import probe_cron, work


@job(cron=probe_cron(), name="restart-probe", isolation="process")
def restart_probe(ctx: RunContext) -> None:
    work(ctx)
