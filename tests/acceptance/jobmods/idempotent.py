"""An every-second job whose effect is a POST to a payments service (PAYMENTS_URL) that
honours `Idempotency-Key`, keyed by `ctx.key`. The first period it ever runs hangs after
its call (long enough for the test to kill its node there), or, with PAUSE_BEFORE_CALL
set, pauses that long before its call (for the test to freeze its node there); each call
writes a line (period, attempt, node) as evidence outside the runs table."""

from __future__ import annotations

import json
import os
import time
import urllib.request
from pathlib import Path

from scheduler import RunContext, job


@job(cron="* * * * * *", name="charge", lease="3s")
def charge(ctx: RunContext) -> None:
    hang = Path(os.environ["HANG_MARKER"])
    pause = os.environ.get("PAUSE_BEFORE_CALL")
    if pause and not hang.exists():
        hang.write_text(f"{ctx.period.isoformat()} {ctx.node}\n")
        time.sleep(float(pause))  # the holder is frozen here, and taken over meanwhile
    request = urllib.request.Request(
        os.environ["PAYMENTS_URL"],
        data=json.dumps({"period": ctx.period.isoformat(), "attempt": ctx.attempt}).encode(),
        headers={"Idempotency-Key": ctx.key("charge"), "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        answer.read()
    with Path(os.environ["EXECUTION_LOG"]).open("a") as log:
        log.write(f"{ctx.period.isoformat()} {ctx.attempt} {ctx.node}\n")
    if not hang.exists():
        hang.write_text(f"{ctx.period.isoformat()} {ctx.node}\n")
        time.sleep(120)
