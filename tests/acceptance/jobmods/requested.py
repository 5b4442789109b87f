"""A job run only when asked (its schedule is once a year), for console requests: each
run writes a line to EXECUTION_LOG. A short lease, so nodes beat every two seconds."""

from __future__ import annotations

from scheduler import RunContext, job
from tests.acceptance.jobmods.evidence import note


@job(cron="0 0 1 1 *", name="on-demand", lease="6s")
def on_demand(ctx: RunContext) -> None:
    note(ctx, "run")
