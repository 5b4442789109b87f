"""An every-second job with a two-second grace, for `scheduler check` and the HTTP endpoint.

It fails on periods whose second is a multiple of FAIL_EVERY (0, the default: never).
"""

from __future__ import annotations

import os

from scheduler import RunContext, job


@job(cron="* * * * * *", name="watched", alert_after="2s", lease="3s")
def watched(ctx: RunContext) -> None:
    every = int(os.environ.get("FAIL_EVERY", "0"))
    if every and ctx.period.second % every == 0:
        raise RuntimeError(f"period {ctx.period.isoformat()} fails on purpose")
