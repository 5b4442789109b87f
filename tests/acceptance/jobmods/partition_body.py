"""The body of the partition tests' jobs: it notes when it started, when it was told to
stop, and when it would have finished."""

from __future__ import annotations

import os
import time

from scheduler import RunContext
from tests.acceptance.jobmods.evidence import note


def work(ctx: RunContext) -> None:
    note(ctx, f"pid={os.getpid()}")
    note(ctx, f"start@{time.time():.3f}")
    if ctx.cancelled.wait(float(os.environ.get("BODY_SECONDS", "20"))):
        note(ctx, f"cancelled@{time.time():.3f}")
        return
    note(ctx, f"done@{time.time():.3f}")
