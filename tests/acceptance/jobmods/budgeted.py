"""An every-second job, and a template for schedules, each with a catch-up budget of 3 per
9 s (one start each 3 s), for catch-up budget tests."""

from __future__ import annotations

from scheduler import RunContext, job
from tests.acceptance.jobmods.evidence import note


@job(cron="* * * * * *", name="budgeted", lease="3s", catchup_budget="3/9s")
def budgeted(ctx: RunContext) -> None:
    note(ctx, "done")


# A template whose schedules (created by the tests at run time) each have that budget.
@job(cron=None, name="tenant_budgeted", lease="3s", catchup_budget="3/9s")
def tenant_budgeted(ctx: RunContext, tenant: int) -> None:
    note(ctx, f"tenant-{tenant}")
