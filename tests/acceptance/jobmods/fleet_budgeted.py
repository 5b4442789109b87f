"""Two every-second jobs with no catch-up budget of their own, for a fleet's budget
(`--catchup-budget`)."""

from __future__ import annotations

from scheduler import RunContext, job
from tests.acceptance.jobmods.evidence import note


@job(cron="* * * * * *", name="fleet-north", lease="3s")
def fleet_north(ctx: RunContext) -> None:
    note(ctx, "done")


@job(cron="* * * * * *", name="fleet-south", lease="3s")
def fleet_south(ctx: RunContext) -> None:
    note(ctx, "done")
