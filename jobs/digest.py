"""A coroutine job: `async def` jobs run on the daemon's event loop."""

from __future__ import annotations

import asyncio

from scheduler import RunContext, job


@job(cron="*/5 * * * *", name="digest")
async def digest(ctx: RunContext) -> None:
    """Pretend to gather a five-minute digest without blocking other jobs."""
    await asyncio.sleep(0.1)
    ctx.log.info("digest_built", period=ctx.period.isoformat())
