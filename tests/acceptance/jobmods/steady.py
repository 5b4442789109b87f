"""An every-second job with the default lease whose body takes BODY_SECONDS (0.5 by
default): a node killed at any moment is likely inside it."""

from __future__ import annotations

import os
import threading

from scheduler import RunContext, job
from tests.acceptance.jobmods.evidence import note


@job(cron="* * * * * *", name="steady")
def steady(ctx: RunContext) -> None:
    note(ctx, "start")
    threading.Event().wait(float(os.environ.get("BODY_SECONDS", "0.5")))
    note(ctx, "done")
