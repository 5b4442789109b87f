"""The `scheduler` command: parsing, exit codes and output. No business logic here.

A user's mistake prints one line on stderr and exits 2.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from scheduler import catalog, logs, metrics
from scheduler import http as operations_http
from scheduler.config import (
    DEFAULT_CATCHUP_INTERVAL,
    DEFAULT_DATABASE_URL,
    DEFAULT_GRACE,
    DEFAULT_JOBS,
    DEFAULT_RECOVERY_INTERVAL,
    DEFAULT_SUMMARY_INTERVAL,
    DEFAULT_WORKERS,
    DISTRIBUTION,
    node_identity,
    parse_jobs_option,
    parse_option_duration,
)
from scheduler.daemon import SIDE_CONNECTIONS, Daemon, DaemonSettings
from scheduler.errors import SchemaOutdatedError, UserError
from scheduler.liveness import Mode as LivenessMode
from scheduler.registry import Job, importable, load_jobs
from scheduler.retention import parse_retention
from scheduler.store import migrate as migrations
from scheduler.store.database import Database, open_database

USER_ERROR = 2
# `migrate --check`: the schema needs `scheduler migrate`.
BEHIND = 1
Command = TypeVar("Command", bound=Callable[..., Any])


class Group(click.Group):
    """Turns a UserError anywhere below into one line on stderr and exit status 2, and
    click's own usage errors (a missing argument, an unknown option) into the same shape."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except UserError as error:
            click.echo(f"error: {error}", err=True)
            ctx.exit(USER_ERROR)

    def main(  # one signature for both of click's overloads
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            status = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as error:
            error.show()  # the bare command: its help, as click shows it
            sys.exit(USER_ERROR)
        except click.UsageError as error:
            click.echo(f"error: {usage_line(error)}", err=True)
            sys.exit(USER_ERROR)
        except click.ClickException as error:
            click.echo(f"error: {error.format_message()}", err=True)
            sys.exit(error.exit_code)
        except click.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(1)
        sys.exit(status if isinstance(status, int) else 0)


def usage_line(error: click.UsageError) -> str:
    """click's message on one line, with the command to ask for help."""
    message = " ".join(error.format_message().split())
    if error.ctx is None:
        return message
    return f"{error.ctx.command_path}: {message} (see `{error.ctx.command_path} --help`)"


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
@click.version_option(package_name=DISTRIBUTION, prog_name="scheduler")
def main() -> None:
    """Run cron jobs once per period across any number of replicas."""


def node_options(command: Command) -> Command:
    """Options of every command that acts as a node: `run` and `run-once`."""
    command = click.option(
        "--node-name",
        envvar="SCHEDULER_NODE_NAME",
        default=None,
        show_envvar=True,
        help="Name shown for this node [default: HOST-PID].",
    )(command)
    return click.option(
        "--grace",
        envvar="SCHEDULER_GRACE",
        default=DEFAULT_GRACE,
        show_default=True,
        show_envvar=True,
        help="How long running jobs may finish after SIGTERM.",
    )(command)


def load_job_modules(jobs_modules: str) -> dict[str, Job]:
    """The jobs of `--jobs`. Left at its default (`jobs`, the examples of a source
    checkout) where no `jobs` package is, it asks for the user's own modules: the
    image ships none on its import path, so production never runs the demo by accident."""
    context = click.get_current_context(silent=True)
    source = context.get_parameter_source("jobs_modules") if context else None
    if source is ParameterSource.DEFAULT and not importable(DEFAULT_JOBS):
        raise UserError(
            f"--jobs: name your job modules with --jobs or SCHEDULER_JOBS (e.g. myapp.jobs or "
            f"./tasks.py); there is no {DEFAULT_JOBS!r} package in {Path.cwd()} to default to"
        )
    return load_jobs(parse_jobs_option(jobs_modules))


def prepare(
    database_url: str,
    jobs_modules: str,
    log_format: str,
    log_level: str,
    *,
    migrate_first: bool,
    connections: int = 10,
    application_name: str = "scheduler",
) -> tuple[Database, dict[str, Job]]:
    """Everything that may refuse bad input, before anything is written."""
    logs.configure(logs.LogFormat(log_format), log_level)
    jobs = load_job_modules(jobs_modules)
    database = open_database(
        database_url,
        must_exist=not migrate_first,
        connections=connections,
        application_name=application_name,
    )
    # Job code sees the database this command uses, flag or variable (jobs/app.py reads it).
    os.environ["SCHEDULER_DATABASE_URL"] = database_url
    if migrate_first:
        migrations.upgrade(database)
    migrations.require_current_schema(database)
    return database, jobs


@main.command()
@database_option
@jobs_option
@logging_options
@node_options
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
    "--recovery-interval",
    envvar="SCHEDULER_RECOVERY_INTERVAL",
    default=DEFAULT_RECOVERY_INTERVAL,
    show_default=True,
    show_envvar=True,
    help="Longest pause between passes that retake expired and failed runs.",
)
@click.option(
    "--catchup-interval",
    envvar="SCHEDULER_CATCHUP_INTERVAL",
    default=DEFAULT_CATCHUP_INTERVAL,
    show_default=True,
    show_envvar=True,
    help="How often to look for periods missed while no node ran (also at start).",
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
@click.option(
    "--http",
    envvar="SCHEDULER_HTTP",
    default=None,
    show_envvar=True,
    help="Serve /healthz, /readyz, /metrics (and the web console, with the console extra) "
    "on HOST:PORT, e.g. 127.0.0.1:9464 [default: off].",
)
@click.option(
    "--metrics-per-job/--no-metrics-per-job",
    envvar="SCHEDULER_METRICS_PER_JOB",
    default=False,
    show_default=True,
    show_envvar=True,
    help="Label the duration and start-lag histograms of /metrics by job (34 series a job).",
)
@click.option(
    "--retention",
    envvar="SCHEDULER_RETENTION",
    default=None,
    show_envvar=True,
    help="Prune runs and done items older than this (90d) at start and hourly [default: off].",
)
@click.option(
    "--summary-interval",
    envvar="SCHEDULER_SUMMARY_INTERVAL",
    default=DEFAULT_SUMMARY_INTERVAL,
    show_default=True,
    show_envvar=True,
    help="How often a node says how many periods ran on other nodes (0: never).",
)
@click.option(
    "--liveness",
    envvar="SCHEDULER_LIVENESS",
    type=click.Choice([mode.value for mode in LivenessMode]),
    default=LivenessMode.AUTO.value,
    show_default=True,
    show_envvar=True,
    help="How others learn this node died: session (a lock on a direct PostgreSQL "
    "connection, about a second), lease (the lease runs out), auto (session unless a "
    "pooler may sit in between).",
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
    recovery_interval: str,
    catchup_interval: str,
    migrate_first: bool,
    http: str | None,
    metrics_per_job: bool,
    retention: str | None,
    summary_interval: str,
    liveness: str,
) -> None:
    """Run the scheduler daemon until SIGTERM or SIGINT."""
    server = operations_http.bind(http)  # a busy port is refused before anything is written
    metrics.per_job_histograms(metrics_per_job)
    settings = DaemonSettings(
        workers=workers,
        grace=parse_option_duration("--grace", grace),
        recovery_interval=parse_option_duration("--recovery-interval", recovery_interval),
        catchup_interval=parse_option_duration("--catchup-interval", catchup_interval),
        retention=parse_retention("--retention", retention) if retention else None,
        liveness=LivenessMode(liveness),
        summary_interval=parse_option_duration("--summary-interval", summary_interval) or None,
    )
    node = node_identity(node_name)
    database, jobs = prepare(
        database_url,
        jobs_modules,
        log_format,
        log_level,
        migrate_first=migrate_first,
        connections=workers + SIDE_CONNECTIONS,
        application_name=f"scheduler {node.name}",
    )
    catalog.register(database, jobs)
    daemon = Daemon(database, jobs, node, settings)
    install_signal_handlers(daemon.request_stop)
    if server is not None:
        server.start(database, daemon.keeper)
    abandoned = daemon.run()
    if abandoned:
        # Threads of abandoned jobs cannot be joined; their runs are already recorded.
        sys.stdout.flush()
        os._exit(0)
    database.dispose()


def install_signal_handlers(request_stop: Callable[[], None]) -> None:
    """First SIGTERM/SIGINT: stop and drain. A second one: leave at once."""
    received: list[int] = []

    def handle(signum: int, _frame: FrameType | None) -> None:
        if received:
            os._exit(128 + signum)
        received.append(signum)
        logs.get_logger().info("signal_received", signal=signal.Signals(signum).name)
        request_stop()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


@main.command()
@database_option
@logging_options
@click.option(
    "--check",
    "check_only",
    is_flag=True,
    help="Only say whether the schema is current: exit 0 if it is, 1 (one line) if behind.",
)
@click.option(
    "--sql",
    "as_sql",
    is_flag=True,
    help="Print the SQL script for this database's dialect instead of running it.",
)
def migrate(
    database_url: str, log_format: str, log_level: str, check_only: bool, as_sql: bool
) -> None:
    """Create or upgrade the scheduler's tables to this version's schema.

    The revision is kept in scheduler_alembic_version, apart from an application's
    alembic_version; one an older scheduler wrote there is moved over.
    """
    logs.configure(logs.LogFormat(log_format), log_level)
    if check_only and as_sql:
        raise UserError("migrate: give --check or --sql, not both")
    if check_only or as_sql:
        database, state = migrations.inspect_url(database_url)
        try:
            if as_sql:
                click.echo(migrations.offline_sql(database, state), nl=False)
                return
            line = state.describe()
            if line.startswith("unknown: "):
                raise SchemaOutdatedError(line.removeprefix("unknown: "))
            click.echo(line)
            if not state.up_to_date:
                sys.exit(BEHIND)
        finally:
            database.dispose()
        return
    database = open_database(database_url, must_exist=False)
    before = migrations.current_revision(database)
    migrations.upgrade(database)
    after = migrations.current_revision(database)
    logs.get_logger().info("schema_migrated", before=before, after=after)
    database.dispose()


# The operator commands (views and check; backfill, trigger, rerun, pause, resume, plan;
# the web console) register themselves on `main`.
from scheduler import (  # noqa: E402, F401
    cli_console,
    cli_history,
    cli_items,
    cli_views,
)
