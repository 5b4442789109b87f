"""A 12 s job every 20 s with the default lease, noting each start and end: two nodes
that share a hostname must never run one period side by side."""

from __future__ import annotations

import time

from scheduler import RunContext, job
from tests.acceptance.jobmods.evidence import note


@job(cron="*/20 * * * * *", name="shared-host")
def shared_host(ctx: RunContext) -> None:
    note(ctx, f"start@{time.time():.3f}")
    time.sleep(12)
    note(ctx, f"done@{time.time():.3f}")
