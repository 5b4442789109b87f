"""Jobs that give on-call something to hear about: one fails every other second (no
retry), one succeeds every second."""

from __future__ import annotations

from scheduler import RunContext, job


@job(cron="* * * * * *", name="alarming", timeout="5s")
def alarming(ctx: RunContext) -> None:
    if ctx.period.second % 2 == 0:
        raise RuntimeError(f"period {ctx.period.isoformat()} failed")


@job(cron="* * * * * *", name="calm")
def calm() -> None:
    pass
