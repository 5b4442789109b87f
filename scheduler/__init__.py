"""Cron jobs that run once per period across any number of replicas, and lose none.

The names below are imported when first used, not with the package: `scheduler --help`,
`scheduler plan` and the read-only commands import `scheduler.cli`, which must not pay
for the run path (structlog, APScheduler, the executors) they never touch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scheduler.calendars import Calendar
    from scheduler.errors import RunLostError
    from scheduler.hooks import on_event
    from scheduler.model import Event
    from scheduler.policy import Pool
    from scheduler.registry import Job, job
    from scheduler.run.context import Previous, RunContext

    __version__: str

__all__ = [
    "Calendar",
    "Event",
    "Job",
    "Pool",
    "Previous",
    "RunContext",
    "RunLostError",
    "__version__",
    "job",
    "on_event",
]

_HOMES = {
    "Calendar": "scheduler.calendars",
    "Event": "scheduler.model",
    "Job": "scheduler.registry",
    "Pool": "scheduler.policy",
    "Previous": "scheduler.run.context",
    "RunContext": "scheduler.run.context",
    "RunLostError": "scheduler.errors",
    "job": "scheduler.registry",
    "on_event": "scheduler.hooks",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        # The one version is pyproject's, as the installed distribution carries it.
        from scheduler.config import version  # noqa: PLC0415

        return version()
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'scheduler' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
