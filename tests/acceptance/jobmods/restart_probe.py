"""A 12 s job every 20 s (at the seconds `PROBE_CRON` names) with the default 30 s lease
that honours `ctx.cancelled`: a database restart or a dropped session lands inside a run."""

from __future__ import annotations

from scheduler import RunContext, job
from tests.acceptance.jobmods.partition_body import probe_cron, work


@job(cron=probe_cron(), name="restart-probe")
def restart_probe(ctx: RunContext) -> None:
    work(ctx)
