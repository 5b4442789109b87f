"""Commands that run a job in the foreground or change history by hand: run-once,
backfill, trigger, rerun, pause, resume, and plan (which only reads the schedule)."""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import click

from scheduler import job_names, views
from scheduler.admin import Admin
from scheduler.alerting import environment as alerting_environment
from scheduler.cli.options import (
    database_option,
    jobs_option,
    logging_options,
    node_options,
    prepare,
)
from scheduler.cli.signals import install_signal_handlers
from scheduler.config import node_identity, parse_option_duration, parse_period
from scheduler.errors import UserError
from scheduler.node import foreground
from scheduler.node.foreground import Foreground
from scheduler.registry import Job
from scheduler.run.job_table import JobTable
from scheduler.schedules import Schedules
from scheduler.store.database import Database
from scheduler.tables import table

SUCCESS, FAILURE = 0, 1


@dataclass(frozen=True)
class NodeArgs:
    """The options every foreground command shares, as one value."""

    database_url: str
    jobs_modules: str
    log_format: str
    log_level: str
    node_name: str | None
    grace: str


def foreground_options(command: Callable[..., None]) -> Callable[..., None]:
    """Add the database, jobs, logging and node options; hand them over as `node=NodeArgs`."""
    names = [field.name for field in fields(NodeArgs)]

    @functools.wraps(command)
    def bundled(**options: Any) -> None:
        node = NodeArgs(**{name: options.pop(name) for name in names})
        command(node=node, **options)

    return database_option(jobs_option(logging_options(node_options(bundled))))


def _foreground(node: NodeArgs, job_name: str) -> Foreground:
    """Check everything the user gave, then a foreground node for the job; nothing written."""
    grace_period = parse_option_duration("--grace", node.grace)
    observers = alerting_environment.configure(os.environ)
    database, jobs = prepare(
        node.database_url, node.jobs_modules, node.log_format, node.log_level, migrate_first=False
    )
    job = _pick(jobs, job_name)
    stop = threading.Event()
    install_signal_handlers(stop.set)
    identity = node_identity(node.node_name)
    return Foreground(database, job, identity, grace_period, stop, observers=observers)


def _pick(jobs: dict[str, Job], name: str) -> Job:
    full = job_names.resolve(name, jobs)
    if full is None:
        known = ", ".join(sorted(jobs)) or "none"
        raise UserError(f"job {name!r}: name: no such job in --jobs (known: {known})")
    return jobs[full]


def _operator(node: NodeArgs, job_name: str) -> tuple[Admin, Job, threading.Event]:
    """Check everything the user gave; the job, and a stop event that SIGTERM sets."""
    parse_option_duration("--grace", node.grace)
    database, jobs = prepare(
        node.database_url, node.jobs_modules, node.log_format, node.log_level, migrate_first=False
    )
    job = _schedule_job(database, jobs, job_name) if job_name[:1] == "@" else _pick(jobs, job_name)
    stop = threading.Event()
    install_signal_handlers(stop.set)
    return Admin(database), job, stop


def _schedule_job(database: Database, jobs: dict[str, Job], name: str) -> Job:
    """The job of a schedule's runs (`@KEY`): its job from --jobs, with the schedule's
    arguments and policy, as a node would run it."""
    key = name[1:]
    try:
        return JobTable(jobs, database)[name]
    except KeyError:
        pass
    found = Schedules(database).get(key)
    if found is None:
        raise UserError(f"schedule {key!r}: key: no such schedule")
    known = ", ".join(sorted(jobs)) or "none"
    raise UserError(f"schedule {key!r}: job: {found.job!r} is not in --jobs (known: {known})")


def _leave(status: int) -> None:
    """Exit without joining a job thread that may have outlived the grace period."""
    sys.stdout.flush()
    os._exit(status)


@click.command(name="run-once")
@click.argument("job_name", metavar="JOB")
@click.option(
    "--period",
    default=None,
    help="The period to run, ISO-8601 (UTC if no offset) [default: the latest due].",
)
@foreground_options
def run_once(*, job_name: str, period: str | None, node: NodeArgs) -> None:
    """Claim one period of JOB and run it here; exit 0 if it succeeded or another node
    holds it, 1 if it failed. For system cron and Kubernetes CronJobs."""
    given = parse_period(period)
    _leave(foreground.run_once(_foreground(node, job_name), given))


@click.command()
@click.argument("job_name", metavar="JOB")
@click.option("--from", "start", required=True, help="First period, ISO-8601 (UTC if no offset).")
@click.option("--to", "end", required=True, help="Last period, ISO-8601 (UTC if no offset).")
@click.option(
    "--include-failed", is_flag=True, help="Also re-run failed, timed-out and abandoned periods."
)
@click.option("--dry-run", is_flag=True, help="List what would run and change nothing.")
@foreground_options
def backfill(
    *, job_name: str, start: str, end: str, include_failed: bool, dry_run: bool, node: NodeArgs
) -> None:
    """Run JOB's periods from --from to --to that have no successful run, oldest first.

    Periods that never ran (no row, skipped, missed) run; failed ones only with
    --include-failed. Exit 0 if every period run succeeded, 1 otherwise.
    """
    admin, job, stop = _operator(node, job_name)
    done = admin.backfill(
        job,
        start,
        end,
        include_failed=include_failed,
        dry_run=dry_run,
        node_name=node.node_name,
        grace=node.grace,
        stop=stop,
    )
    if dry_run:
        rows = [
            [views.iso(step.period) or "", step.status.value if step.status else "-", step.action]
            for step in done.steps
        ]
        click.echo(table(["PERIOD", "STATUS", "ACTION"], rows))
        return
    _leave(SUCCESS if done.failed == 0 and not done.interrupted else FAILURE)


@click.command()
@click.argument("job_name", metavar="JOB")
@foreground_options
def trigger(*, job_name: str, node: NodeArgs) -> None:
    """Run JOB now, in the foreground, as a manual run (exit 0 on success, 1 on failure).

    JOB may be `@KEY`, a schedule created at run time: its job runs with its arguments.
    """
    admin, job, stop = _operator(node, job_name)
    outcome = admin.trigger(job, node_name=node.node_name, grace=node.grace, stop=stop)
    _leave(SUCCESS if outcome.succeeded else FAILURE)


@click.command()
@click.argument("job_name", metavar="JOB")
@click.argument("period")
@click.option("--force", is_flag=True, help="Run it again even though it succeeded.")
@foreground_options
def rerun(*, job_name: str, period: str, force: bool, node: NodeArgs) -> None:
    """Run PERIOD of JOB again as its next attempt (refuses a succeeded one without --force).

    JOB may be `@KEY`, a schedule created at run time.
    """
    admin, job, stop = _operator(node, job_name)
    outcome = admin.rerun(
        job, period, force=force, node_name=node.node_name, grace=node.grace, stop=stop
    )
    _leave(SUCCESS if outcome.succeeded else FAILURE)


def _set_paused(job_name: str, database_url: str, *, paused: bool) -> None:
    with Admin(database_url) as admin:
        job_name = admin.job_name(job_name)
        if paused:
            admin.pause(job_name)
        else:
            admin.resume(job_name)
    click.echo(f"{job_name}: {'paused' if paused else 'resumed'}")


@click.command()
@click.argument("job_name", metavar="JOB")
@database_option
def pause(job_name: str, database_url: str) -> None:
    """Pause JOB on every node: its periods are recorded skipped (reason paused)."""
    _set_paused(job_name, database_url, paused=True)


@click.command()
@click.argument("job_name", metavar="JOB")
@database_option
def resume(job_name: str, database_url: str) -> None:
    """Resume JOB; the periods that passed while paused are not caught up."""
    _set_paused(job_name, database_url, paused=False)
