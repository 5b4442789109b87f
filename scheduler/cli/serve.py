"""The commands that serve: `run` (the daemon) and `migrate` (its schema)."""

from __future__ import annotations

import os
import sys
from datetime import timedelta

import click

from scheduler import http as operations_http
from scheduler import logs, metrics
from scheduler.alerting import environment as alerting_environment
from scheduler.cli.options import (
    BEHIND,
    database_option,
    jobs_option,
    logging_options,
    node_options,
    prepare,
)
from scheduler.cli.signals import install_signal_handlers
from scheduler.config import (
    DEFAULT_CATCHUP_INTERVAL,
    DEFAULT_HEALTHZ_GRACE,
    DEFAULT_RECOVERY_INTERVAL,
    DEFAULT_SUMMARY_INTERVAL,
    DEFAULT_WORKERS,
    node_identity,
    parse_option_duration,
)
from scheduler.errors import JobDefinitionError, SchemaOutdatedError, UserError
from scheduler.node import registration
from scheduler.node.daemon import Daemon, DaemonSettings, pool_size
from scheduler.node.liveness import Mode as LivenessMode
from scheduler.node.pruner import parse_retention
from scheduler.policy import CatchupBudget, catchup_budget
from scheduler.store import migrate as migrations
from scheduler.store.database import open_database


@click.command()
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
    "--catchup-budget",
    envvar="SCHEDULER_CATCHUP_BUDGET",
    default=None,
    show_envvar=True,
    help="At most RUNS catch-up runs of all jobs per DURATION across the fleet (10/1h), "
    "one each DURATION/RUNS; the periods past it are deferred [default: off].",
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
    "--healthz-grace",
    envvar="SCHEDULER_HEALTHZ_GRACE",
    default=DEFAULT_HEALTHZ_GRACE,
    show_default=True,
    show_envvar=True,
    help="How far past its own next wake-up the main loop may be before /healthz "
    "answers 503 (a wedged loop; an idle one sleeping until its next period is fine).",
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
    "connection, about a second; the node then also prepares its statements on the "
    "server), lease (the lease runs out), auto (session unless a pooler may sit in "
    "between).",
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
    catchup_budget: str | None,
    migrate_first: bool,
    http: str | None,
    healthz_grace: str,
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
        catchup_budget=_fleet_budget(catchup_budget),
        healthz_grace=_healthz_grace(healthz_grace),
    )
    node = node_identity(node_name)
    observers = alerting_environment.configure(os.environ)
    database, jobs = prepare(
        database_url,
        jobs_modules,
        log_format,
        log_level,
        migrate_first=migrate_first,
        connections=pool_size(workers),
        application_name=f"scheduler {node.name}",
    )
    registration.register(database, jobs)
    daemon = Daemon(database, jobs, node, settings, observers=observers)
    install_signal_handlers(daemon.request_stop)
    if server is not None:
        server.start(database, daemon.heartbeat, daemon.turns)
    abandoned = daemon.run()
    if abandoned:
        # Threads of abandoned jobs cannot be joined; their runs are already recorded.
        sys.stdout.flush()
        os._exit(0)
    database.dispose()


@click.command()
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
        state = migrations.inspect_url(database_url)
        if as_sql:
            click.echo(migrations.offline_sql(database_url, state), nl=False)
            return
        line = state.describe()
        if line.startswith("unknown: "):
            raise SchemaOutdatedError(line.removeprefix("unknown: "))
        click.echo(line)
        if not state.up_to_date:
            sys.exit(BEHIND)
        return
    database = open_database(database_url, must_exist=False)
    before = migrations.upgrade(database)  # as found under the migration lock
    after = migrations.current_revision(database)
    logs.get_logger().info("schema_migrated", before=before, after=after)
    database.dispose()


def _healthz_grace(raw: str) -> timedelta:
    """`--healthz-grace`: a positive duration."""
    grace = parse_option_duration("--healthz-grace", raw)
    if grace <= timedelta(0):
        raise UserError(f"--healthz-grace: must be longer than 0s, got {raw!r}")
    return grace


def _fleet_budget(raw: str | None) -> CatchupBudget | None:
    """`--catchup-budget`, checked as a job's `catchup_budget` is."""
    if not raw:
        return None
    try:
        return catchup_budget("fleet", "--catchup-budget", raw)
    except JobDefinitionError as error:
        raise UserError(str(error).split(": ", 1)[1]) from None
