"""`scheduler schedules`: the schedules an application creates at run time, from the
command line: list, show, create, change, pause, resume and delete them
(`scheduler.cli.main` puts the group in the `scheduler` command).

They need no job code: a schedule names a job that a node registered, so they work from
any machine that reaches the database. Each change is one transaction of
`scheduler.schedules.Schedules`, which refuses bad input before anything is written.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import click

from scheduler import views
from scheduler.admin import Admin
from scheduler.cli.options import Command, database_option
from scheduler.cli.views import emit, json_option, reading
from scheduler.durations import format_duration
from scheduler.errors import ScheduleDefinitionError, UserError
from scheduler.schedules import Schedule, ScheduleExistsError, ScheduleNotFoundError, Schedules
from scheduler.store.schedules import PAGE_MAX
from scheduler.tables import table

# Runs `show` lists: enough to see how the last periods went (`runs --job @KEY` for more).
RECENT_RUNS = 10
# Arguments as a table cell: a tenant id and a few options fit; longer ones are cut.
ARGS_WIDTH = 60


@click.group(name="schedules")
def schedules() -> None:
    """List, show, create, change, pause, resume and delete the schedules created at run
    time.

    A schedule binds a job a node registered (a template job, `@job(cron=None)`) to a
    trigger and JSON arguments; its periods are the runs of the job `@KEY`.
    """


def trigger_options(command: Command) -> Command:
    """The trigger, arguments and catch-up policy that `create` and `change` take (each
    adds its own `--timezone`: create's defaults to UTC, change's keeps the old one)."""
    options = [
        click.option("--cron", metavar="EXPR", help="Fire at the periods of this cron expression."),
        click.option("--every", metavar="DURATION", help="Fire every DURATION (90s, 15m, 1d)."),
        click.option(
            "--start",
            metavar="INSTANT",
            help="With --every: its first period, UTC ISO-8601 [default: now].",
        ),
        click.option("--at", metavar="INSTANT", help="Fire once, at this UTC ISO-8601 instant."),
        click.option(
            "--args",
            "args_json",
            metavar="JSON",
            help="The keyword arguments of the job, a JSON object: '{\"tenant\": 42}'.",
        ),
        click.option(
            "--catchup",
            metavar="all|latest|none",
            help="Its own catch-up policy instead of its job's.",
        ),
        click.option(
            "--catchup-window",
            metavar="DURATION",
            help="Catch up only periods missed this recently, instead of its job's window.",
        ),
        click.option(
            "--catchup-limit",
            metavar="N",
            help="Catch up at most this many missed periods, instead of its job's limit.",
        ),
        click.option(
            "--jitter",
            metavar="DURATION",
            help="Fire each period up to DURATION late (the same delay on every node), "
            "instead of its job's jitter.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@schedules.command(name="list")
@click.option("--prefix", help="Only the keys that start with this (one tenant's: tenant-42:).")
@click.option("--job", "job_name", help="Only the schedules of this job.")
@click.option(
    "--paused/--active", default=None, help="Only paused, or only active, ones [default: both]."
)
@click.option("--deleted", is_flag=True, help="The deleted schedules instead of the live ones.")
@click.option(
    "--limit",
    type=click.IntRange(1, PAGE_MAX),
    default=100,
    show_default=True,
    help="At most this many.",
)
@click.option("--after", metavar="KEY", help="The page after this key (the previous page's hint).")
@database_option
@json_option
def list_schedules(
    *,
    prefix: str | None,
    job_name: str | None,
    paused: bool | None,
    deleted: bool,
    limit: int,
    after: str | None,
    database_url: str,
    as_json: bool,
) -> None:
    """List schedules in key order, a page at a time: trigger, next due, state, arguments.

    A full page ends with the `--after` that gives the next one (`next_after` in JSON).
    """
    with reading(database_url) as database:
        listing = Schedules(database).list(
            prefix or "", after=after, limit=limit, job=job_name, paused=paused, deleted=deleted
        )
    record = {
        "schedules": [schedule.as_dict() for schedule in listing.schedules],
        "next_after": listing.next_after,
    }
    emit(as_json, record, listing_text)


@schedules.command(name="show")
@click.argument("key")
@database_option
@json_option
def show_schedule(key: str, database_url: str, as_json: bool) -> None:
    """Show schedule KEY and its recent periods (the runs of job @KEY, newest first)."""
    with reading(database_url) as database:
        found = Schedules(database).get(key)
        if found is None:
            raise ScheduleNotFoundError(f"schedule {key!r}: key: no such schedule")
        runs = Admin(database).runs(job=found.run_job, limit=RECENT_RUNS)
    record = found.as_dict() | {"runs": [views.run_record(run) for run in runs]}
    emit(as_json, record, schedule_text)


@schedules.command(name="create")
@click.argument("key")
@click.argument("job_name", metavar="JOB")
@trigger_options
@click.option("--timezone", default="UTC", show_default=True, help="The IANA time zone of --cron.")
@click.option("--paused", is_flag=True, help="Create it paused: it fires nothing until resumed.")
@click.option(
    "--replace",
    is_flag=True,
    help="Make an existing schedule of KEY exactly this, instead of refusing (idempotent).",
)
@database_option
@json_option
def create_schedule(
    *,
    key: str,
    job_name: str,
    cron: str | None,
    every: str | None,
    start: str | None,
    at: str | None,
    timezone: str,
    args_json: str | None,
    catchup: str | None,
    catchup_window: str | None,
    catchup_limit: str | None,
    jitter: str | None,
    paused: bool,
    replace: bool,
    database_url: str,
    as_json: bool,
) -> None:
    """Create schedule KEY of JOB with one trigger: --cron, --every or --at.

    JOB must be a job that a node registered (`scheduler jobs` lists them).
    """
    fields: dict[str, Any] = {
        "cron": cron,
        "every": every,
        "start": start,
        "at": at,
        "timezone": timezone,
        "args": _arguments(key, args_json),
        "catchup": catchup,
        "catchup_window": catchup_window,
        "catchup_limit": _whole(key, "catchup_limit", catchup_limit),
        "jitter": jitter,
        "paused": paused,
    }
    with reading(database_url) as database:
        store = Schedules(database)
        put = store.replace if replace else store.create
        try:
            schedule = put(key, job_name, **fields)
        except ScheduleExistsError as error:
            raise ScheduleExistsError(f"{error} (--replace makes it this one)") from None
        except ScheduleDefinitionError as error:
            if error.field != "job" or not job_name.strip():
                raise
            # The API's hint (pass the Job itself) is for Python; a command has only names.
            raise ScheduleDefinitionError(
                key,
                "job",
                f"no node has registered a job {job_name!r} (`scheduler jobs` lists them)",
            ) from None
    created = schedule.version == 1 or not replace
    report(as_json, "created" if created else "replaced", schedule)


@schedules.command(name="change")
@click.argument("key")
@trigger_options
@click.option("--timezone", help="A new IANA time zone for its trigger.")
@database_option
@json_option
def change_schedule(
    *,
    key: str,
    cron: str | None,
    every: str | None,
    start: str | None,
    at: str | None,
    timezone: str | None,
    args_json: str | None,
    catchup: str | None,
    catchup_window: str | None,
    catchup_limit: str | None,
    jitter: str | None,
    database_url: str,
    as_json: bool,
) -> None:
    """Change some fields of schedule KEY; a new trigger keeps the periods the old one owes.

    What is not given stays as it is (`create --replace` sets every field).
    """
    given: dict[str, Any] = {
        "cron": cron,
        "every": every,
        "start": start,
        "at": at,
        "timezone": timezone,
        "args": _arguments(key, args_json),
        "catchup": catchup,
        "catchup_window": catchup_window,
        "catchup_limit": _whole(key, "catchup_limit", catchup_limit),
        "jitter": jitter,
    }
    changes = {name: value for name, value in given.items() if value is not None}
    if not changes:
        raise UserError(
            f"schedule {key!r}: nothing to change: give --cron, --every, --at, --timezone, "
            "--args, --jitter or a --catchup option"
        )
    with reading(database_url) as database:
        schedule = Schedules(database).change(key, **changes)
    report(as_json, "changed", schedule)


@schedules.command(name="pause")
@click.argument("key")
@database_option
@json_option
def pause_schedule(key: str, database_url: str, as_json: bool) -> None:
    """Pause schedule KEY: the periods that pass while it is paused are never run."""
    _act(database_url, as_json, "paused", lambda store: store.pause(key))


@schedules.command(name="resume")
@click.argument("key")
@database_option
@json_option
def resume_schedule(key: str, database_url: str, as_json: bool) -> None:
    """Resume schedule KEY from now; what it owed before the pause still runs."""
    _act(database_url, as_json, "resumed", lambda store: store.resume(key))


@schedules.command(name="delete")
@click.argument("key")
@database_option
@json_option
def delete_schedule(key: str, database_url: str, as_json: bool) -> None:
    """Delete schedule KEY: it fires nothing more; a period already claimed runs to its end."""
    with reading(database_url) as database:
        if not Schedules(database).delete(key):
            raise ScheduleNotFoundError(f"schedule {key!r}: key: no such schedule")
    emit(as_json, {"key": key, "deleted": True}, lambda _: f"deleted schedule {key!r}")


# -- helpers --------------------------------------------------------------------------


def _act(
    database_url: str, as_json: bool, verb: str, action: Callable[[Schedules], Schedule]
) -> None:
    with reading(database_url) as database:
        schedule = action(Schedules(database))
    report(as_json, verb, schedule)


def report(as_json: bool, verb: str, schedule: Schedule) -> None:
    """What a change left: the schedule as JSON, or one line."""
    emit(as_json, schedule.as_dict(), lambda record: change_line(verb, record))


def change_line(verb: str, record: dict[str, Any]) -> str:
    if record["paused"]:
        when = "paused"
    elif record["next_due"] is not None:
        when = f"next due {views.short_time(record['next_due'])}"
    else:
        when = "fires no more"
    return f"{verb} schedule {record['key']!r}: job {record['job']}, {record['describe']}, {when}"


def _arguments(key: str, text: str | None) -> dict[str, Any] | None:
    """`--args` read as JSON here; its names and size are the API's to check."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ScheduleDefinitionError(key, "args", f"not JSON: {error}") from None
    if not isinstance(value, dict):
        raise ScheduleDefinitionError(
            key, "args", f"must be a JSON object of keyword arguments, got {text}"
        )
    return value


def _whole(key: str, field: str, text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise ScheduleDefinitionError(
            key, field, f"must be a whole number ≥ 1, got {text!r}"
        ) from None


def _state(record: dict[str, Any]) -> str:
    if record["deleted_at"] is not None:
        return "deleted"
    if record["paused"]:
        return "paused (failures)" if record.get("pause_reason") else "paused"
    return "active"


def _args_text(args: dict[str, Any]) -> str:
    text = json.dumps(args, sort_keys=True)
    return text if len(text) <= ARGS_WIDTH else text[: ARGS_WIDTH - 1] + "…"


def listing_text(record: dict[str, Any]) -> str:
    found = record["schedules"]
    rows = [
        [
            schedule["key"],
            schedule["job"],
            schedule["describe"],
            views.short_time(schedule["next_due"]),
            _state(schedule),
            _args_text(schedule["args"]),
        ]
        for schedule in found
    ]
    headers = ["KEY", "JOB", "TRIGGER", "NEXT DUE", "STATE", "ARGS"]
    text = table(headers, rows) if found else "no schedules"
    if record["next_after"] is not None:
        text += f"\nnext page: --after {shlex.quote(record['next_after'])}"
    return text


def schedule_text(record: dict[str, Any]) -> str:
    """`schedules show` as text: its fields, then its recent runs."""
    window = record["catchup_window_seconds"]
    fields = [
        ("key", record["key"]),
        ("job", record["job"]),
        ("trigger", record["describe"]),
        ("state", _state(record)),
        ("next due", record["next_due"] or "-"),
        ("args", json.dumps(record["args"], sort_keys=True)),
        ("catchup", record["catchup"] or "the job's"),
        (
            "catchup window",
            format_duration(timedelta(seconds=window)) if window is not None else "the job's",
        ),
        ("catchup limit", str(record["catchup_limit"] or "the job's")),
        (
            "jitter",
            format_duration(timedelta(seconds=record["jitter_seconds"]))
            if record["jitter_seconds"] is not None
            else "the job's",
        ),
        ("version", str(record["version"])),
        ("created", record["created_at"]),
        ("updated", record["updated_at"]),
        ("last fired", record["fired_at"] or "-"),
    ]
    lines = [f"{name + ':':<16}{value}" for name, value in fields]
    runs = record["runs"]
    lines += ["", f"runs of @{record['key']}:" if runs else f"no runs of @{record['key']} yet"]
    if runs:
        lines.append(views.runs_table(runs))
    return "\n".join(lines)
