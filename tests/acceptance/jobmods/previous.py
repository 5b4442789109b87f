"""An every-second job that picks up from its previous period: it writes a line (its
period, the previous one's period, status and checkpoint) and checkpoints its own
period, as evidence outside the runs table."""

from __future__ import annotations

import json
import os
from pathlib import Path

from scheduler import RunContext, job


@job(cron="* * * * * *", name="sync")
def sync(ctx: RunContext) -> None:
    previous = ctx.previous
    line = {
        "period": ctx.period.isoformat(),
        "previous": previous and previous.period.isoformat(),
        "status": previous and previous.status.value,
        "checkpoint": previous and previous.checkpoint,
    }
    ctx.checkpoint({"synced_to": ctx.period.isoformat()})
    with Path(os.environ["EXECUTION_LOG"]).open("a") as log:
        log.write(json.dumps(line) + "\n")
