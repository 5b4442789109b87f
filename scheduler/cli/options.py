"""What the `scheduler` commands share: the options and their parsing, loading the job
modules and opening the database before anything is written (the error style is
`scheduler.cli.group`'s; the signal handlers are `scheduler.cli.signals`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from scheduler import logs
from scheduler.config import (
    DEFAULT_DATABASE_URL,
    DEFAULT_GRACE,
    DEFAULT_JOBS,
    conflicting_distribution,
    parse_jobs_option,
)
from scheduler.errors import UserError

if TYPE_CHECKING:
    from scheduler.registry import Job
    from scheduler.store.database import Database

# `migrate --check`: the schema needs `scheduler migrate`.
BEHIND = 1
Command = TypeVar("Command", bound=Callable[..., Any])


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


def node_options(command: Command) -> Command:
    """Options of every command that acts as a node: `run` and `run-once`."""
    command = click.option(
        "--node-name",
        envvar="SCHEDULER_NODE_NAME",
        default=None,
        show_envvar=True,
        help="Name of this node (a pod's, a unit's), kept across restarts. Its id, in the"
        " logs and as a run's holder, is NAME-RANDOM, new with each process: a restarted"
        " node must never be taken for the one that died, whose runs others take over"
        " [default: HOST-PID-RANDOM].",
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
    from scheduler.registry import importable, load_jobs  # noqa: PLC0415 - see prepare

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
    """Everything that may refuse bad input, before anything is written.

    The store and the registry are imported here, not with the module: every command's
    options come from this module, and `--help` or `plan` need neither."""
    from scheduler.store import migrate as migrations  # noqa: PLC0415
    from scheduler.store.database import open_database  # noqa: PLC0415

    logs.configure(logs.LogFormat(log_format), log_level)
    conflict = conflicting_distribution()
    if conflict:
        logs.get_logger().warning("distribution_conflict", message=conflict)
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
        # Said as `scheduler migrate` says it: the revision found (None: no schema yet).
        before = migrations.upgrade(database)
        after = migrations.current_revision(database)
        logs.get_logger().info("schema_migrated", before=before, after=after)
    migrations.require_current_schema(database)
    return database, jobs
