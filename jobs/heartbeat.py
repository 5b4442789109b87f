"""An every-minute job: the smallest useful job, and a sign of life in the logs."""

from __future__ import annotations

from scheduler import RunContext, job


@job(cron="* * * * *", name="heartbeat")
def heartbeat(ctx: RunContext) -> None:
    """Log one line per minute; exactly one replica runs each minute."""
    ctx.log.info("heartbeat", period=ctx.period.isoformat())
