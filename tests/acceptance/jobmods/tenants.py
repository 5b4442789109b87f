"""A job whose periods come from schedules created at run time: each run writes its
schedule, period, arguments and node, as evidence outside the runs table."""

from __future__ import annotations

import json
import os
from pathlib import Path

from scheduler import Event, RunContext, job


# A template: no schedule of its own; the tests give it schedules at run time.
@job(cron=None, name="tenant_report")
def tenant_report(ctx: RunContext, tenant: int, note: str = "") -> None:
    line = {
        "schedule": ctx.schedule,
        "period": ctx.period.isoformat(),
        "tenant": tenant,
        "note": note,
        "args": dict(ctx.args),
        "node": ctx.node,
    }
    with Path(os.environ["EXECUTION_LOG"]).open("a") as log:
        log.write(json.dumps(line) + "\n")


def heard(event: Event) -> None:
    """Writes down each alert event a schedule's run gave rise to (HEARD_LOG)."""
    with Path(os.environ["HEARD_LOG"]).open("a") as log:
        log.write(json.dumps({"kind": event.kind.value, "job": event.job, "key": event.key}))
        log.write("\n")


# A template whose runs fail when the schedule says so: its hooks hear the schedule's
# events, as they hear a code-declared job's.
@job(cron=None, name="tenant_flaky", on={"failed": heard})
def tenant_flaky(ctx: RunContext, *, fail: bool) -> None:
    if fail:
        raise RuntimeError(f"{ctx.schedule} failed as told")


@job(cron=None, name="tenant_slow", lease="6s")
def tenant_slow(ctx: RunContext, *, tenant: int) -> None:
    """Its first attempt runs a minute (long enough to kill its node inside it); a later
    attempt returns at once."""
    with Path(os.environ["EXECUTION_LOG"]).open("a") as log:
        log.write(json.dumps({"schedule": ctx.schedule, "attempt": ctx.attempt, "node": ctx.node}))
        log.write("\n")
    if ctx.attempt == 1:
        ctx.cancelled.wait(60)
