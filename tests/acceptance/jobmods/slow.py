"""Jobs that overrun a one-second timeout: a function, a coroutine, a child process."""

from __future__ import annotations

import asyncio
import os
import time

from scheduler import RunContext, job
from tests.acceptance.jobmods.evidence import note


@job(cron="0 0 * * *", name="slow-thread", timeout="1s")
def slow_thread(ctx: RunContext) -> None:
    note(ctx, "start")
    if ctx.cancelled.wait(30):
        note(ctx, "cancelled")


@job(cron="0 0 * * *", name="slow-coroutine", timeout="1s")
async def slow_coroutine(ctx: RunContext) -> None:
    note(ctx, "start")
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        note(ctx, "cancelled")
        raise


@job(cron="0 0 * * *", name="slow-process", timeout="1s", isolation="process")
def slow_process(ctx: RunContext) -> None:
    note(ctx, f"pid={os.getpid()}")
    time.sleep(30)
    note(ctx, "survived")
