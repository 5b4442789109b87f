"""Operator commands that only read the database: jobs, runs, runs show, nodes, check.

They need no job code, so they work from any machine that reaches the database,
even when every node is down. Each prints an aligned table, or JSON with `--json`.
`scheduler.cli.main` puts the commands in the group.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import click

from scheduler import check as checking
from scheduler import retirement, views
from scheduler.admin import Admin
from scheduler.cli.event_records import event_record
from scheduler.cli.options import Command, database_option
from scheduler.durations import format_duration
from scheduler.model import ONE_SHOT
from scheduler.states import RunStatus
from scheduler.store import deliveries as stored_events
from scheduler.store import migrate as migrations
from scheduler.store import queries
from scheduler.store.database import Database, open_database
from scheduler.store.jobs import all_jobs

SOMETHING_WRONG = 1
NODES_SEEN_WITHIN = timedelta(days=1)


def json_option(command: Command) -> Command:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(
        command
    )


@contextmanager
def reading(database_url: str) -> Iterator[Database]:
    """Open an existing database whose schema matches this version, and close it after."""
    database = open_database(database_url, connections=2)
    try:
        migrations.require_current_schema(database)
        yield database
    finally:
        database.dispose()


def emit(as_json: bool, data: Any, render: Callable[[Any], str]) -> None:
    click.echo(json.dumps(data, indent=2) if as_json else render(data))


@click.command(name="jobs")
@database_option
@json_option
def list_jobs(database_url: str, as_json: bool) -> None:
    """List the jobs the nodes registered: schedule, next period, last run, paused."""
    with reading(database_url) as database:
        now = queries.clock(database)
        rows = all_jobs(database)
        retired = retirement.retired_among(
            database, rows, lambda node: checking.alive(node, now), now
        )
        records = views.job_records(rows, queries.latest_runs(database), now, retired)
    if not records and not as_json:
        click.echo("no jobs registered yet: a node registers its jobs when `scheduler run` starts")
        return
    emit(as_json, records, views.jobs_table)


@click.group(name="runs", invoke_without_command=True)
@database_option
@json_option
@click.option("--job", "job_names", multiple=True, help="Only this job (repeatable).")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice([status.value for status in RunStatus]),
    help="Only runs in this status (repeatable).",
)
@click.option("--since", help="Only periods at or after this UTC time, or this long ago (1d).")
@click.option(
    "--limit", type=click.IntRange(min=1), default=50, show_default=True, help="At most this many."
)
@click.pass_context
def list_runs(
    ctx: click.Context,
    *,
    database_url: str,
    as_json: bool,
    job_names: tuple[str, ...],
    statuses: tuple[str, ...],
    since: str | None,
    limit: int,
) -> None:
    """List runs, newest period first: status, attempt, node, duration, error."""
    if ctx.invoked_subcommand is not None:
        return
    with Admin(database_url) as admin:
        rows = admin.runs(job=job_names, status=statuses, since=since, limit=limit)
    emit(as_json, [views.run_record(row) for row in rows], views.runs_table)


@list_runs.command(name="show")
@click.argument("target", metavar="RUN_ID | JOB")
@click.argument("period", required=False)
@database_option
@json_option
def show_run(target: str, period: str | None, database_url: str, as_json: bool) -> None:
    """Show one run with every attempt and its traceback: by RUN_ID (from any log line),
    or by JOB and PERIOD as `scheduler runs` prints it (UTC ISO-8601)."""
    with Admin(database_url) as admin:
        detail = admin.run(target, period)
        alerts = stored_events.recent(admin.database, job=detail.run.job, period=detail.run.period)
    record = views.run_detail_record(detail.run, detail.attempts)
    record["alerts"] = [event_record(row) for row in alerts]
    emit(as_json, record, run_detail_with_alerts)


def run_detail_with_alerts(record: dict[str, Any]) -> str:
    """`runs show` as text, then the period's alert events and where each delivery stands."""
    text = views.run_detail_text(record)
    if not record["alerts"]:
        return text
    lines = [
        f"  {alert['kind']:<11}{alert['state']:<10}tries {alert['tries']}"
        + (f"  {alert['last_error']}" if alert["last_error"] else "")
        for alert in record["alerts"]
    ]
    return "\n".join([text, "", "alerts:", *lines])


@click.command(name="nodes")
@database_option
@json_option
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="Also one-shot commands (run-once, trigger, rerun, backfill) and nodes not heard "
    "from for more than a day.",
)
def list_nodes(database_url: str, as_json: bool, show_all: bool) -> None:
    """List the daemon nodes: alive, stopped or lost, with their last heartbeat and version."""
    with reading(database_url) as database:
        now = queries.clock(database)
        seen_since = None if show_all else now - NODES_SEEN_WITHIN
        records = [
            views.node_record(node, now)
            for node in queries.list_nodes(database, seen_since=seen_since)
            if show_all or node.jobs_digest != ONE_SHOT
        ]
    emit(as_json, records, views.nodes_table)


@click.command(name="check")
@database_option
@json_option
@click.option("--job", "job_names", multiple=True, help="Check only this job (repeatable).")
@click.option(
    "--window",
    default=format_duration(checking.DEFAULT_WINDOW),
    show_default=True,
    help="Report runs failed, timed out or missed that were recorded this long ago or later.",
)
@click.pass_context
def check(
    ctx: click.Context, *, database_url: str, as_json: bool, job_names: tuple[str, ...], window: str
) -> None:
    """Exit 1 listing overdue jobs and failed or missed periods; exit 0 when all is well.

    Reads only the database, so it answers even when every node is down.
    """
    with Admin(database_url) as admin:
        report = admin.check(job=job_names, window=window)
    emit(as_json, views.check_record(report), lambda record: views.check_text(record, window))
    if not report.ok:
        ctx.exit(SOMETHING_WRONG)
