"""`scheduler deferred`: the periods catch-up deferred past a job's budget
(`@job(catchup_budget=...)`), and the operator's two answers: run them now, or skip
them (`scheduler.cli.main` puts the group in the `scheduler` command)."""

from __future__ import annotations

from typing import Any

import click

from scheduler import views
from scheduler.admin import Admin
from scheduler.cli.options import database_option
from scheduler.cli.views import emit, json_option, reading
from scheduler.store.deferred import DeferredPeriods
from scheduler.tables import table


@click.group(name="deferred")
def deferred() -> None:
    """List the periods deferred by a catch-up budget, and run or skip them.

    A job with `catchup_budget="K/W"` starts at most K catch-up runs per W after an
    outage; the periods past it wait, recorded `deferred (budget)`, for an answer.
    """


@deferred.command(name="list")
@click.argument("job_name", metavar="[JOB]", required=False)
@database_option
@json_option
def list_deferred(job_name: str | None, database_url: str, as_json: bool) -> None:
    """List each job's deferred periods: how many wait for an answer, how many were
    approved and wait for a node, how many wait for their budget's pace (a schedule
    created at run time's: they run by themselves), the oldest and the newest."""
    with reading(database_url) as database:
        admin = Admin(database)
        found = admin.deferred(job_name and admin.job_name(job_name))
    emit(as_json, [_record(row) for row in found], _text)


@deferred.command(name="run")
@click.argument("job_name", metavar="JOB")
@click.option("--oldest", type=click.IntRange(min=1), help="Only the oldest N of them.")
@database_option
def run_deferred(job_name: str, oldest: int | None, database_url: str) -> None:
    """Catch up now: a node claims JOB's deferred periods, oldest first, outside its
    budget."""
    with reading(database_url) as database:
        admin = Admin(database)
        job_name = admin.job_name(job_name)
        count = admin.run_deferred(job_name, oldest=oldest)
    click.echo(f"job {job_name}: {count} deferred period(s) approved; a node runs them next")


@deferred.command(name="skip")
@click.argument("job_name", metavar="JOB")
@click.option("--oldest", type=click.IntRange(min=1), help="Only the oldest N of them.")
@database_option
def skip_deferred(job_name: str, oldest: int | None, database_url: str) -> None:
    """Skip JOB's deferred periods: recorded skipped (reason budget), never run."""
    with reading(database_url) as database:
        admin = Admin(database)
        job_name = admin.job_name(job_name)
        count = admin.skip_deferred(job_name, oldest=oldest)
    click.echo(f"job {job_name}: {count} deferred period(s) skipped")


def _record(row: DeferredPeriods) -> dict[str, Any]:
    return {
        "job": row.job,
        "waiting": row.waiting,
        "approved": row.approved,
        "paced": row.paced,
        "first": views.iso(row.first),
        "last": views.iso(row.last),
    }


def _text(records: list[dict[str, Any]]) -> str:
    if not records:
        return "no deferred periods"
    return table(
        ["JOB", "WAITING", "APPROVED", "PACED", "OLDEST", "NEWEST"],
        [
            [
                record["job"],
                str(record["waiting"]),
                str(record["approved"]),
                str(record["paced"]),
                views.short_time(record["first"]),
                views.short_time(record["last"]),
            ]
            for record in records
        ],
    )
