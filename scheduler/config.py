"""One frozen settings object, built from flags and SCHEDULER_* variables and checked once."""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass
from datetime import timedelta
from importlib.metadata import version

from scheduler.durations import parse_duration
from scheduler.errors import UserError
from scheduler.logs import LogFormat
from scheduler.store.nodes import NodeIdentity

DEFAULT_DATABASE_URL = "sqlite:///scheduler.db"
DEFAULT_JOBS = "jobs"
DEFAULT_GRACE = "30s"
DEFAULT_WORKERS = 16


@dataclass(frozen=True)
class Settings:
    database_url: str
    jobs: tuple[str, ...]
    log_format: LogFormat
    log_level: str
    node_name: str | None = None
    grace: timedelta = timedelta(seconds=30)
    workers: int = DEFAULT_WORKERS


def parse_jobs_option(raw: str) -> tuple[str, ...]:
    """`--jobs` takes comma-separated module or package names."""
    modules = tuple(part.strip() for part in raw.split(",") if part.strip())
    if not modules:
        raise UserError("--jobs: name at least one module or package, e.g. --jobs jobs")
    return modules


def parse_grace(raw: str) -> timedelta:
    try:
        return parse_duration(raw)
    except ValueError as error:
        raise UserError(f"--grace: {error}") from None


def node_identity(name: str | None) -> NodeIdentity:
    """A node id unique even when two containers share a hostname and pid 1."""
    host, pid = socket.gethostname(), os.getpid()
    node_name = name or f"{host}-{pid}"
    return NodeIdentity(
        id=f"{node_name}-{secrets.token_hex(3)}",
        name=node_name,
        host=host,
        pid=pid,
        version=version("scheduler"),
    )
