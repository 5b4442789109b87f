"""Jobs for the web console's tests: one that fails with markup in its error message,
one that succeeds every second, and one that leaves an item stuck when triggered."""

from __future__ import annotations

import asyncio
import time

from scheduler import RunContext, job

PAYLOAD = "<script>alert(1)</script>"


def _deep(depth: int) -> None:
    if depth == 0:
        raise RuntimeError(f"payment refused: {PAYLOAD}")
    _deep(depth - 1)


@job(cron="*/2 * * * * *", name="charge<b>cards</b>")
def charge_cards() -> None:
    _deep(3)


@job(cron="* * * * * *", name="heartbeat")
def heartbeat(ctx: RunContext) -> None:
    time.sleep(0.02)
    ctx.checkpoint({"period": ctx.period.isoformat()})


@job(cron="0 0 1 1 *", name="mailer")
async def mailer(ctx: RunContext) -> None:
    """Leaves `email:<b>42</b>` claimed: the coroutine is cancelled inside the item."""
    with ctx.item("email:<b>42</b>"):
        await asyncio.sleep(0)
        raise asyncio.CancelledError
