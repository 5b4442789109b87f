"""Jobs with calendars. `holiday` runs every second but its calendar excludes the day
HOLIDAY (UTC); `day_off` runs every second but its calendar is a function, excluding
HOLIDAY's day of the week (a function never ends, so it never warns); `workday` runs
every second and its calendar excludes only WORKDAY_OFF, its last date (so it warns
that its dates run out); the template `tenant_sync` shares `holiday`'s calendar. Each
run writes a line to EXECUTION_LOG; the `calendar_ending` hook writes what it heard to
HEARD_LOG."""

from __future__ import annotations

import json
import os
from datetime import date
from pathlib import Path

from scheduler import Calendar, Event, RunContext, job

HOLIDAY = Calendar("company-holidays", dates=[os.environ["HOLIDAY"]])
LAST_DAY_OFF = Calendar("ops-days-off", dates=[os.environ["WORKDAY_OFF"]])
WEEKLY_DAY_OFF = Calendar(
    "weekly-day-off",
    exclude=lambda day: day.weekday() == date.fromisoformat(os.environ["HOLIDAY"]).weekday(),
)


def _ran(ctx: RunContext) -> None:
    line = {"job": ctx.job, "period": ctx.period.isoformat(), "node": ctx.node}
    with Path(os.environ["EXECUTION_LOG"]).open("a") as log:
        log.write(json.dumps(line) + "\n")


def heard(event: Event) -> None:
    with Path(os.environ["HEARD_LOG"]).open("a") as log:
        log.write(json.dumps({"key": event.key, "detail": event.detail}) + "\n")


HOOKS = {"calendar_ending": heard, "skipped": heard, "missed": heard}


@job(cron="* * * * * *", name="holiday", calendar=HOLIDAY, on=HOOKS)
def holiday(ctx: RunContext) -> None:
    _ran(ctx)


@job(cron="* * * * * *", name="day_off", calendar=WEEKLY_DAY_OFF, on=HOOKS)
def day_off(ctx: RunContext) -> None:
    _ran(ctx)


@job(cron="* * * * * *", name="workday", calendar=[LAST_DAY_OFF], on=HOOKS)
def workday(ctx: RunContext) -> None:
    _ran(ctx)


@job(cron=None, name="tenant_sync", calendar=HOLIDAY, on=HOOKS)
def tenant_sync(ctx: RunContext, tenant: int) -> None:
    _ran(ctx)
