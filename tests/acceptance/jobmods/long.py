"""A long every-second job with a short lease, for crash and freeze tests."""

from __future__ import annotations

import os
import time

from scheduler import RunContext, job
from tests.acceptance.jobmods.evidence import note


@job(cron="* * * * * *", name="long", lease="3s")
def long(ctx: RunContext) -> None:
    note(ctx, "start")
    time.sleep(float(os.environ.get("LONG_SECONDS", "4")))
    note(ctx, "done")
