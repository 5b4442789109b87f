"""The `scheduler` command: parsing, exit codes and output. No business logic here.

A user's mistake prints one line on stderr and exits 2.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

import click

from scheduler import logs
from scheduler.config import (
    DEFAULT_DATABASE_URL,
    DEFAULT_GRACE,
    DEFAULT_JOBS,
    DEFAULT_WORKERS,
    Settings,
    node_identity,
    parse_grace,
    parse_jobs_option,
)
from scheduler.daemon import Daemon, DaemonSettings
from scheduler.errors import UserError
from scheduler.registry import Job, load_jobs
from scheduler.store import jobs as job_rows
from scheduler.store import migrate as migrations
from scheduler.store.database import Database, open_database

USER_ERROR = 2
Command = TypeVar("Command", bound=Callable[..., Any])


class Group(click.Group):
    """Turns a UserError anywhere below into one line on stderr and exit status 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except UserError as error:
            click.echo(f"error: {error}", err=True)
            ctx.exit(USER_ERROR)


def database_option(command: Command) -> Command:
    return click.option(
        "--database-url",
        envvar="SCHEDULER_DATABASE_URL",
        default=DEFAULT_DATABASE_URL,
        show_default=True,
        show_envvar=True,
        help="sqlite:///path.db (embedded) or postgresql://user@host/db (shared by replicas).",
    )(command)


def jobs_option(command: Command) -> Command:
    return click.option(
        "--jobs",
        "jobs_modules",
        envvar="SCHEDULER_JOBS",
        default=DEFAULT_JOBS,
        show_default=True,
        show_envvar=True,
        help="Comma-separated modules or packages that define jobs.",
    )(command)


def logging_options(command: Command) -> Command:
    command = click.option(
        "--log-format",
        envvar="SCHEDULER_LOG_FORMAT",
        type=click.Choice([choice.value for choice in logs.LogFormat]),
        default=logs.LogFormat.AUTO.value,
        show_default=True,
        show_envvar=True,
        help="auto: coloured lines on a terminal, JSON lines otherwise.",
    )(command)
    return click.option(
        "--log-level",
        envvar="SCHEDULER_LOG_LEVEL",
        type=click.Choice(logs.LOG_LEVELS),
        default="info",
        show_default=True,
        show_envvar=True,
    )(command)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="scheduler")
def main() -> None:
    """Run cron jobs once per period across any number of replicas."""


@main.command()
@database_option
@jobs_option
@logging_options
@click.option(
    "--node-name",
    envvar="SCHEDULER_NODE_NAME",
    default=None,
    show_envvar=True,
    help="Name shown for this node [default: HOST-PID].",
)
@click.option(
    "--grace",
    envvar="SCHEDULER_GRACE",
    default=DEFAULT_GRACE,
    show_default=True,
    show_envvar=True,
    help="How long running jobs may finish after SIGTERM.",
)
@click.option(
    "--workers",
    envvar="SCHEDULER_WORKERS",
    type=click.IntRange(1, 1024),
    default=DEFAULT_WORKERS,
    show_default=True,
    show_envvar=True,
    help="Threads that run jobs at once.",
)
@click.option(
    "--migrate/--no-migrate",
    "migrate_first",
    envvar="SCHEDULER_MIGRATE",
    default=False,
    show_default=True,
    show_envvar=True,
    help="Apply pending migrations before starting.",
)
def run(
    *,
    database_url: str,
    jobs_modules: str,
    log_format: str,
    log_level: str,
    node_name: str | None,
    grace: str,
    workers: int,
    migrate_first: bool,
) -> None:
    """Run the scheduler daemon until SIGTERM or SIGINT."""
    settings = Settings(
        database_url=database_url,
        jobs=parse_jobs_option(jobs_modules),
        log_format=logs.LogFormat(log_format),
        log_level=log_level,
        node_name=node_name,
        grace=parse_grace(grace),
        workers=workers,
    )
    logs.configure(settings.log_format, settings.log_level)
    jobs = load_jobs(settings.jobs)
    database = open_database(settings.database_url, must_exist=not migrate_first)
    if migrate_first:
        migrations.upgrade(database)
    migrations.require_current_schema(database)
    _register(database, jobs)
    daemon = Daemon(
        database,
        jobs,
        node_identity(settings.node_name),
        DaemonSettings(workers=settings.workers, grace=settings.grace),
    )
    _install_signal_handlers(daemon)
    abandoned = daemon.run()
    if abandoned:
        # Threads of abandoned jobs cannot be joined; their runs are already recorded.
        sys.stdout.flush()
        os._exit(0)
    database.dispose()


def _register(database: Database, jobs: dict[str, Job]) -> None:
    job_rows.register(database, [_definition_row(job) for job in jobs.values()])
    log = logs.get_logger()
    for job in jobs.values():
        log.info(
            "job_registered",
            job=job.name,
            cron=job.schedule.expression,
            timezone=job.schedule.timezone,
        )


def _definition_row(job: Job) -> job_rows.JobDefinitionRow:
    policy = job.policy
    return job_rows.JobDefinitionRow(
        name=job.name,
        cron=job.schedule.expression,
        timezone=job.schedule.timezone,
        lease_seconds=policy.lease.total_seconds(),
        timeout_seconds=policy.timeout.total_seconds() if policy.timeout else None,
        retries=policy.retries,
        alert_after_seconds=policy.overdue_after.total_seconds(),
    )


def _install_signal_handlers(daemon: Daemon) -> None:
    """First SIGTERM/SIGINT: stop and drain. A second one: leave at once."""
    received: list[int] = []

    def handle(signum: int, _frame: FrameType | None) -> None:
        if received:
            os._exit(128 + signum)
        received.append(signum)
        logs.get_logger().info("signal_received", signal=signal.Signals(signum).name)
        daemon.request_stop()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


@main.command()
@database_option
@logging_options
def migrate(database_url: str, log_format: str, log_level: str) -> None:
    """Create or upgrade the scheduler's tables to this version's schema."""
    logs.configure(logs.LogFormat(log_format), log_level)
    database = open_database(database_url, must_exist=False)
    before = migrations.current_revision(database)
    migrations.upgrade(database)
    after = migrations.current_revision(database)
    logs.get_logger().info("schema_migrated", before=before, after=after)
    database.dispose()


# The read-only operator commands (jobs, runs, nodes, check) register themselves on `main`.
from scheduler import cli_views  # noqa: E402, F401
