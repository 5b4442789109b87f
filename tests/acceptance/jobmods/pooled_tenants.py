"""A template in a pool of 2 whose concurrency key is its schedules' tenant: the tests
give it schedules at run time, two of tenant 1's and one of tenant 2's."""

from __future__ import annotations

import time

from scheduler import Pool, RunContext, job
from tests.acceptance.jobmods.evidence import note

PER_TENANT = Pool("per-tenant", limit=2, per_key=1)


@job(
    cron=None,
    name="tenant_sync",
    pool=PER_TENANT,
    concurrency_key="tenant-{tenant}",
    overlap="allow",
    lease="4s",
)
def tenant_sync(ctx: RunContext, tenant: int) -> None:
    note(ctx, f"start@{time.time():.3f}")
    time.sleep(1.5)
    note(ctx, f"done@{time.time():.3f}")
