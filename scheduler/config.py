"""Defaults of every option, and the parsing that turns a flag or SCHEDULER_* value into a
checked setting, with an error that names the option."""

from __future__ import annotations

import functools
import os
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from scheduler.durations import parse_duration
from scheduler.errors import UserError

if TYPE_CHECKING:
    from scheduler.model import NodeIdentity

# The name on the package index: `scheduler` there is another project. The import name
# and the command stay `scheduler`.
DISTRIBUTION = "cronclaim"
DEFAULT_DATABASE_URL = "sqlite:///scheduler.db"
DEFAULT_JOBS = "jobs"
DEFAULT_GRACE = "30s"
DEFAULT_WORKERS = 32
DEFAULT_RECOVERY_INTERVAL = "1s"
DEFAULT_CATCHUP_INTERVAL = "1m"
DEFAULT_SUMMARY_INTERVAL = "1m"
# How far past its own due time the main loop may be before /healthz answers 503: more
# than a turn can take with the database down (each call gives up within 15 s, a
# connection within 5 s) or slow.
DEFAULT_HEALTHZ_GRACE = "60s"


def parse_jobs_option(raw: str) -> tuple[str, ...]:
    """`--jobs` takes comma-separated module or package names, or paths of files or folders."""
    modules = tuple(part.strip() for part in raw.split(",") if part.strip())
    if not modules:
        raise UserError("--jobs: name at least one module or package, e.g. --jobs jobs")
    return modules


def parse_option_duration(option: str, raw: str) -> timedelta:
    try:
        return parse_duration(raw)
    except ValueError as error:
        raise UserError(f"{option}: {error}") from None


def parse_period(raw: str | None, option: str = "--period") -> datetime | None:
    """An ISO-8601 instant with second precision; one without an offset is UTC."""
    if raw is None:
        return None
    try:
        moment = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UserError(
            f"{option}: cannot read {raw!r} as ISO-8601 (e.g. 2026-11-30T00:00:00Z)"
        ) from None
    if moment.microsecond:
        raise UserError(f"{option}: periods have whole seconds, got {raw!r}")
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def parse_instant(option: str, raw: str) -> datetime:
    """An ISO-8601 instant of any precision (a manual run's period has microseconds);
    one without an offset is read as UTC."""
    try:
        moment = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise UserError(
            f"{option}: cannot read {raw!r} as an ISO-8601 time (e.g. 2026-01-31T03:00:00Z)"
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def node_identity(name: str | None) -> NodeIdentity:
    """This process's node: `name` (`--node-name`) as given, kept across restarts, and an
    id new with each process, `NAME-RANDOM` (or `HOST-PID-RANDOM` without a name).

    The id is what the nodes table, each log line's `node` and a run's holder carry.
    It must never be an earlier process's: a node that restarts under the same name
    while its peers are about to take over the dead process's runs would otherwise be
    taken for it, and could write through the dead one's fences. Two containers may
    also share a hostname and both be pid 1.
    """
    # Here, not with the module: `--help` and `plan` read this module's defaults and
    # should not pay for the model's records (a third of `--help`'s time).
    import secrets  # noqa: PLC0415
    import socket  # noqa: PLC0415

    from scheduler import identity  # noqa: PLC0415
    from scheduler.model import NodeIdentity  # noqa: PLC0415

    host, pid = socket.gethostname(), os.getpid()
    token = secrets.token_hex(3)
    # The default name is this process's alone: two containers may share a hostname
    # and both be pid 1. A name given (a pod's, a unit's) is kept across restarts, and
    # the id made unique.
    return NodeIdentity(
        id=f"{name}-{token}" if name else f"{host}-{pid}-{token}",
        name=name or f"{host}-{pid}-{token}",
        host=host,
        pid=pid,
        version=version(),
        process=identity.current(),
    )


@functools.cache
def version() -> str:
    """This distribution's version, pyproject.toml's as the installed metadata carries it
    (the one place it is written); importlib.metadata is loaded only by whoever asks (a
    node, `--version`, the console), not by every command."""
    from importlib import metadata  # noqa: PLC0415

    return metadata.version(DISTRIBUTION)


# The unrelated project on PyPI named `scheduler` installs a top-level package of the
# same name: beside this one, each overwrites the other's files.
CONFLICTING_DISTRIBUTION = "scheduler"


def conflicting_distribution() -> str | None:
    """One line saying that the unrelated `scheduler` distribution is installed beside
    this one, or None when it is not."""
    from importlib import metadata  # noqa: PLC0415

    try:
        other = metadata.version(CONFLICTING_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
    return (
        f"the unrelated PyPI project {CONFLICTING_DISTRIBUTION!r} {other} is installed beside"
        f" {DISTRIBUTION} {version()} and overwrites the same `scheduler` package: run"
        f" `pip uninstall {CONFLICTING_DISTRIBUTION}` then"
        f" `pip install --force-reinstall {DISTRIBUTION}=={version()}`"
    )
