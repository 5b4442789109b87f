"""`scheduler plan`: a job's next periods, or those of a cron expression, in UTC and in
the schedule's time zone. Writes nothing and reads no database; with `--cron` it needs
no job module either, so it imports only the cron parser (it answers at once)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

import click

from scheduler import job_names
from scheduler.cli.options import jobs_option
from scheduler.config import parse_period
from scheduler.cron import Schedule, parse_schedule
from scheduler.errors import ScheduleError, UserError
from scheduler.instants import utc_text
from scheduler.tables import table

if TYPE_CHECKING:
    from scheduler.registry import Job


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
    """Print JOB's next periods (or those of --cron) in UTC and in its time zone.

    A period on a day JOB's calendar excludes is marked with the calendar: it will be
    skipped."""
    schedule, job = _planned_schedule(job_name, cron, timezone, jobs_modules)
    moment = parse_period(after, "--after") or datetime.now(UTC)
    zone = ZoneInfo(schedule.timezone)
    upcoming = [(period, period.astimezone(zone)) for period in _upcoming(schedule, moment, count)]
    skipped_by = {
        period: calendar.name
        for period, _ in upcoming
        if job is not None and (calendar := job.excluded(period)) is not None
    }
    with_calendars = job is not None and bool(job.calendars)
    if as_json:
        for period, local in upcoming:
            record: dict[str, str | None] = {
                "utc": utc_text(period),
                "local": local.isoformat(),
                "zone": zone.key,
            }
            if with_calendars:
                record["skipped_by_calendar"] = skipped_by.get(period)
            click.echo(json.dumps(record))
        return
    rows = []
    for period, local in upcoming:
        row = [utc_text(period), local.isoformat(), local.strftime("%a %Z")]
        if with_calendars:
            row.append(f"skipped ({skipped_by[period]})" if period in skipped_by else "runs")
        rows.append(row)
    headers = ["PERIOD (UTC)", f"LOCAL ({zone.key})", "DAY"]
    click.echo(table(headers + (["CALENDAR"] if with_calendars else []), rows))


def _planned_schedule(
    job_name: str | None, cron: str | None, timezone: str | None, jobs_modules: str
) -> tuple[Schedule, Job | None]:
    """The schedule to plan: a job's from --jobs (with the job), or the expression given
    with --cron."""
    if cron is None:
        if timezone is not None:
            raise UserError("--timezone: only with --cron (a job has its own time zone)")
        if job_name is None:
            raise UserError("plan: name a JOB, or try an expression with --cron '*/5 * * * *'")
        from scheduler.cli.options import load_job_modules  # noqa: PLC0415 - only for a JOB

        jobs = load_job_modules(jobs_modules)
        full = job_names.resolve(job_name, jobs)
        if full is None:
            known = ", ".join(sorted(jobs)) or "none"
            raise UserError(f"job {job_name!r}: name: no such job in --jobs (known: {known})")
        return jobs[full].timed, jobs[full]
    if job_name is not None:
        raise UserError(f"plan: give JOB ({job_name!r}) or --cron, not both")
    try:
        return parse_schedule(cron, timezone or "UTC"), None
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
