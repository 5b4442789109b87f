"""`scheduler plan`: a job's next periods, or those of a cron expression, in UTC and in
the schedule's time zone. Writes nothing and reads no database; with `--cron` it needs
no job module either, so it imports only the cron parser (it answers at once)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import click

from scheduler.cli.options import jobs_option
from scheduler.config import parse_period
from scheduler.cron import Schedule, parse_schedule
from scheduler.errors import ScheduleError, UserError
from scheduler.instants import utc_text
from scheduler.tables import table


@click.command()
@click.argument("job_name", metavar="[JOB]", required=False)
@click.option(
    "--cron",
    default=None,
    help="Try this cron expression instead of a job's; needs no job module, writes nothing.",
)
@click.option("--timezone", default=None, help="With --cron: the IANA time zone [default: UTC].")
@click.option("--count", type=click.IntRange(1, 10_000), default=10, show_default=True)
@click.option("--after", default=None, help="Start after this instant [default: now].")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per period.")
@jobs_option
def plan(
    *,
    job_name: str | None,
    cron: str | None,
    timezone: str | None,
    count: int,
    after: str | None,
    as_json: bool,
    jobs_modules: str,
) -> None:
    """Print JOB's next periods (or those of --cron) in UTC and in its time zone."""
    schedule = _planned_schedule(job_name, cron, timezone, jobs_modules)
    moment = parse_period(after, "--after") or datetime.now(UTC)
    zone = ZoneInfo(schedule.timezone)
    upcoming = [(period, period.astimezone(zone)) for period in _upcoming(schedule, moment, count)]
    if as_json:
        for period, local in upcoming:
            record = {"utc": utc_text(period), "local": local.isoformat(), "zone": zone.key}
            click.echo(json.dumps(record))
        return
    rows = [
        [utc_text(period), local.isoformat(), local.strftime("%a %Z")] for period, local in upcoming
    ]
    click.echo(table(["PERIOD (UTC)", f"LOCAL ({zone.key})", "DAY"], rows))


def _planned_schedule(
    job_name: str | None, cron: str | None, timezone: str | None, jobs_modules: str
) -> Schedule:
    """The schedule to plan: a job's from --jobs, or the expression given with --cron."""
    if cron is None:
        if timezone is not None:
            raise UserError("--timezone: only with --cron (a job has its own time zone)")
        if job_name is None:
            raise UserError("plan: name a JOB, or try an expression with --cron '*/5 * * * *'")
        from scheduler.cli.options import load_job_modules  # noqa: PLC0415 - only for a JOB

        jobs = load_job_modules(jobs_modules)
        if job_name not in jobs:
            known = ", ".join(sorted(jobs)) or "none"
            raise UserError(f"job {job_name!r}: name: no such job in --jobs (known: {known})")
        return jobs[job_name].timed
    if job_name is not None:
        raise UserError(f"plan: give JOB ({job_name!r}) or --cron, not both")
    try:
        return parse_schedule(cron, timezone or "UTC")
    except ScheduleError as error:
        raise UserError(f"--{error.field}: {error.message}") from None


def _upcoming(schedule: Schedule, after: datetime, count: int) -> list[datetime]:
    periods: list[datetime] = []
    moment: datetime | None = after
    while len(periods) < count and moment is not None:
        moment = schedule.next_after(moment)
        if moment is not None:
            periods.append(moment)
    return periods
