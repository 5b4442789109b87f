"""A 12 s job every 20 s with the default 30 s lease that honours `ctx.cancelled`: a
database restart or a dropped session lands inside a run."""

from __future__ import annotations

from scheduler import RunContext, job
from tests.acceptance.jobmods.partition_body import work


@job(cron="*/20 * * * * *", name="restart-probe")
def restart_probe(ctx: RunContext) -> None:
    work(ctx)
