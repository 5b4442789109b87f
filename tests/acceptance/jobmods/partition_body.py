"""The body of the partition tests' jobs: it notes when it started, when it was told to
stop, and when it would have finished."""

from __future__ import annotations

import os
import time
from pathlib import Path

from scheduler import RunContext
from tests.acceptance.jobmods.evidence import note


def probe_cron() -> str:
    """The restart probes' schedule: every 20 s, at the seconds `PROBE_CRON` names (a
    test picks them so that its first period comes a few seconds after its nodes start,
    not up to 20 s later); `*/20` when unset."""
    return os.environ.get("PROBE_CRON", "*/20 * * * * *")


def body_seconds() -> float:
    """`BODY_SECONDS` for the first body noted in the execution log; when set,
    `LATER_BODY_SECONDS` for every later one (a retaken attempt, the next period), so
    that a test need not wait out long bodies it does not look at. Called after the
    body noted its start."""
    first = os.environ.get("BODY_SECONDS", "20")
    later = os.environ.get("LATER_BODY_SECONDS")
    if later is None:
        return float(first)
    lines = Path(os.environ["EXECUTION_LOG"]).read_text().splitlines()
    return float(first if sum(" start@" in line for line in lines) <= 1 else later)


def work(ctx: RunContext) -> None:
    note(ctx, f"pid={os.getpid()}")
    note(ctx, f"start@{time.time():.3f}")
    if ctx.cancelled.wait(body_seconds()):
        note(ctx, f"cancelled@{time.time():.3f}")
        return
    note(ctx, f"done@{time.time():.3f}")
