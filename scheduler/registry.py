"""`@job`: declaring jobs in ordinary modules, and loading those modules.

The decorator validates the definition at once, so a bad cron field fails the
import of its module with a message naming the job and the field.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from scheduler.cron import Schedule, parse_schedule
from scheduler.durations import Duration, parse_duration
from scheduler.errors import JobDefinitionError, ScheduleError, UserError

DEFAULT_LEASE = timedelta(seconds=30)
MIN_LEASE = timedelta(seconds=2)


@dataclass(frozen=True)
class Job:
    """A registered job: the function plus its schedule and policy."""

    name: str
    func: Callable[..., Any]
    schedule: Schedule
    lease: timedelta
    is_async: bool
    takes_context: bool

    @property
    def heartbeat(self) -> timedelta:
        """Renew a third of the way into the lease, so two renewals may fail safely."""
        return self.lease / 3

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The decorated function stays callable as before, e.g. from a test."""
        return self.func(*args, **kwargs)


def job(
    cron: str,
    *,
    name: str | None = None,
    timezone: str = "UTC",
    lease: Duration = DEFAULT_LEASE,
) -> Callable[[Callable[..., Any]], Job]:
    """Declare a scheduled job: `@job(cron="*/5 * * * *")` above a function or coroutine."""

    def register(func: Callable[..., Any]) -> Job:
        job_name = name if name is not None else f"{func.__module__}.{func.__qualname__}"
        return Job(
            name=_check_name(job_name),
            func=func,
            schedule=_check_schedule(job_name, cron, timezone),
            lease=_check_lease(job_name, lease),
            is_async=inspect.iscoroutinefunction(func),
            takes_context=_takes_context(job_name, func),
        )

    return register


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise JobDefinitionError(
            str(name), "name", "must be a non-empty string of ≤ 200 characters"
        )
    return name


def _check_schedule(name: str, cron: str, timezone: str) -> Schedule:
    try:
        return parse_schedule(cron, timezone)
    except ScheduleError as error:
        raise JobDefinitionError(name, error.field, error.message) from None


def _check_lease(name: str, value: Duration) -> timedelta:
    try:
        lease = parse_duration(value)
    except ValueError as error:
        raise JobDefinitionError(name, "lease", str(error)) from None
    if lease < MIN_LEASE:
        raise JobDefinitionError(
            name, "lease", f"must be at least {MIN_LEASE.seconds}s, got {value!r}"
        )
    return lease


def _takes_context(name: str, func: Callable[..., Any]) -> bool:
    """Jobs take either nothing or one `RunContext`; anything else is a definition error."""
    if not callable(func):
        raise JobDefinitionError(name, "function", f"{func!r} is not callable")
    required = [
        parameter
        for parameter in inspect.signature(func).parameters.values()
        if parameter.default is inspect.Parameter.empty
        and parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD)
    ]
    if len(required) > 1:
        raise JobDefinitionError(name, "function", "must take no argument or one (the RunContext)")
    return len(inspect.signature(func).parameters) > 0


def load_jobs(module_names: Sequence[str]) -> dict[str, Job]:
    """Import the named modules (a package with all its modules) and collect their jobs."""
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    found: dict[str, Job] = {}
    seen: set[int] = set()
    for module in _import_all(module_names):
        for candidate in vars(module).values():
            if not isinstance(candidate, Job) or id(candidate) in seen:
                continue
            seen.add(id(candidate))
            if candidate.name in found:
                raise JobDefinitionError(
                    candidate.name,
                    "name",
                    f"defined twice ({found[candidate.name].func.__module__} "
                    f"and {candidate.func.__module__})",
                )
            found[candidate.name] = candidate
    return found


def _import_all(module_names: Sequence[str]) -> Iterable[ModuleType]:
    for module_name in module_names:
        module = _import(module_name)
        yield module
        if hasattr(module, "__path__"):
            for info in pkgutil.walk_packages(module.__path__, prefix=f"{module.__name__}."):
                yield _import(info.name)


def _import(module_name: str) -> ModuleType:
    """Import one module, turning its failure into one line that shows the cause."""
    try:
        return importlib.import_module(module_name)
    except JobDefinitionError:
        raise
    except ModuleNotFoundError as error:
        if error.name and module_name.startswith(error.name):
            raise UserError(
                f"--jobs: no module named {module_name!r} (looked in {Path.cwd()} and sys.path)"
            ) from None
        raise UserError(_import_failure(module_name, error)) from None
    except Exception as error:  # noqa: BLE001 - any failure of user code is reported, not raised
        raise UserError(_import_failure(module_name, error)) from None


def _import_failure(module_name: str, error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    where = next(
        (
            f" at {Path(f.filename).name}:{f.lineno}"
            for f in reversed(frames)
            if "importlib" not in f.filename
        ),
        "",
    )
    return (
        f"--jobs: module {module_name!r} failed to import: {type(error).__name__}: {error}{where}"
    )
