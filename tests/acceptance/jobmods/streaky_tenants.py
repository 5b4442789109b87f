"""A template whose runs always fail, paused by the scheduler on the second failure in a
row: the tests give it a schedule at run time, which is paused alone."""

from __future__ import annotations

from scheduler import RunContext, job


@job(cron=None, name="tenant_streaky", pause_after_failures=2)
def tenant_streaky(ctx: RunContext, tenant: int) -> None:
    raise RuntimeError(f"tenant {tenant}: the upstream is down")
