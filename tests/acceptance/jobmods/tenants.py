"""A job whose periods come from schedules created at run time: each run writes its
schedule, period, arguments and node, as evidence outside the runs table."""

from __future__ import annotations

import json
import os
from pathlib import Path

from scheduler import RunContext, job


# A template: no schedule of its own; the tests give it schedules at run time.
@job(cron=None, name="tenant_report")
def tenant_report(ctx: RunContext, tenant: int, note: str = "") -> None:
    line = {
        "schedule": ctx.schedule,
        "period": ctx.period.isoformat(),
        "tenant": tenant,
        "note": note,
        "args": dict(ctx.args),
        "node": ctx.node,
    }
    with Path(os.environ["EXECUTION_LOG"]).open("a") as log:
        log.write(json.dumps(line) + "\n")
