"""`@job`: declaring jobs in ordinary modules, and loading those modules.

The decorator validates the definition at once, so a bad cron field fails the
import of its module with a message naming the job and the field.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from inspect import CO_VARARGS, CO_VARKEYWORDS
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any
from zoneinfo import ZoneInfo

from scheduler import logs
from scheduler import policy as policy_fields
from scheduler.calendars import Calendar, job_calendars
from scheduler.cron import Schedule, parse_schedule
from scheduler.durations import Duration
from scheduler.errors import JobDefinitionError, ScheduleError, UserError
from scheduler.hooks import Hook, job_hooks
from scheduler.model import Due, lock_key
from scheduler.policy import (
    MIN_LEASE,
    Catchup,
    Isolation,
    Overlap,
    Policy,
    Pool,
    PoolDefinitionError,
)
from scheduler.remote import Declared, Remote
from scheduler.states import EventKind

# What the jobs table says of a template's schedule: it has none of its own.
TEMPLATE_CRON = ""
# Every option's default is the Policy's own: one source.
DEFAULTS = Policy()


@dataclass(frozen=True)
class Job:
    """A registered job: the function plus its schedule and policy."""

    name: str
    func: Callable[..., Any]
    # None: a template, whose periods come only from schedules created at run time.
    schedule: Schedule | None
    policy: Policy
    is_async: bool
    takes_context: bool
    # The job's own alert hooks by event kind (`@job(on=...)`); global ones are extra.
    hooks: Mapping[EventKind, tuple[Hook, ...]] = field(default_factory=dict, compare=False)
    # Its periods run on a task queue's workers (`executor=celery(...)`); None: here.
    remote: Remote | None = None
    # A schedule created at run time (`@<key>`): the keyword arguments its function is
    # called with, and the code-declared job it is made of (`run.job_table`).
    args: Mapping[str, Any] = field(default_factory=dict, compare=False)
    template: str | None = None
    # Days its periods are not run (`@job(calendar=...)`): recorded skipped (calendar).
    calendars: tuple[Calendar, ...] = field(default=(), compare=False)

    @property
    def timed(self) -> Schedule:
        """Its own schedule; only a job that has one (not a template) is asked."""
        if self.schedule is None:
            raise JobDefinitionError(
                self.name, "cron", "a template has no schedule of its own (see its schedules)"
            )
        return self.schedule

    @property
    def is_template(self) -> bool:
        return self.schedule is None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The decorated function stays callable as before, e.g. from a test."""
        return self.func(*args, **kwargs)

    def due(self, period: datetime) -> Due:
        """What the store needs to claim one scheduled period of this job."""
        return Due(
            job=self.name,
            period=period,
            lease_seconds=self.policy.lease.total_seconds(),
            overlap_limit=self.policy.overlap.limit,
            excluded=self.excluded(period) is not None,
        )

    def excluded(self, period: datetime, timezone: str | None = None) -> Calendar | None:
        """The calendar that excludes the day `period` falls on in the job's zone (or
        `timezone`, a schedule's), if any. A calendar function that raises is logged
        (`calendar_failed`) and excludes nothing: the period runs."""
        if not self.calendars:
            return None
        zone = timezone or (self.schedule.timezone if self.schedule else "UTC")
        day = period.astimezone(ZoneInfo(zone)).date()
        for calendar in self.calendars:
            try:
                if calendar.excludes(day):
                    return calendar
            except Exception as error:  # noqa: BLE001 - the user's function, any bug
                logs.get_logger().warning(
                    "calendar_failed",
                    job=self.name,
                    calendar=calendar.name,
                    day=day.isoformat(),
                    error=f"{type(error).__name__}: {error}",
                )
        return None

    @property
    def lock_key(self) -> int:
        """The job's advisory lock and share-out hash (see `scheduler.model.lock_key`)."""
        return lock_key(self.name)


def job(
    cron: str | None,
    *,
    name: str | None = None,
    timezone: str = "UTC",
    lease: Duration = DEFAULTS.lease,
    overlap: str = DEFAULTS.overlap,
    timeout: Duration | None = DEFAULTS.timeout,
    retries: int = DEFAULTS.retries,
    retry_backoff: Duration = DEFAULTS.retry_backoff,
    isolation: str = DEFAULTS.isolation,
    alert_after: Duration | None = DEFAULTS.alert_after,
    catchup: str = DEFAULTS.catchup,
    catchup_window: Duration = DEFAULTS.catchup_window,
    catchup_limit: int = DEFAULTS.catchup_limit,
    catchup_budget: str | tuple[int, Duration] | None = None,
    jitter: Duration = DEFAULTS.jitter,
    alert_after_failures: int = DEFAULTS.alert_after_failures,
    pause_after_failures: int | None = DEFAULTS.pause_after_failures,
    on: Mapping[str, Hook | Iterable[Hook]] | None = None,
    executor: Declared | None = None,
    calendar: Calendar | Sequence[Calendar] | None = None,
    pool: Pool | None = None,
    concurrency_key: str | None = None,
) -> Callable[[Callable[..., Any]], Job]:
    """Declare a scheduled job: `@job(cron="*/5 * * * *")` above a function or coroutine.

    Every option is checked here, so a mistake fails the import of its module with
    a message naming the job and the field. `executor=celery(...)` (`scheduler.celery`)
    hands each period to a Celery worker instead of running it in the node.

    `cron=None` declares a template: a job with no schedule of its own, whose periods
    come from schedules created at run time (`scheduler.schedules`), which give its
    function their arguments as keywords after the RunContext.

    `pool=Pool("reports", limit=4)` runs at most 4 periods of the pool's members at once
    across the fleet; `concurrency_key` (a template's may name its schedules' arguments,
    `"{tenant}"`) caps those of one key at the pool's `per_key`.
    """
    if not isinstance(cron, str | None):
        # `@job` without parentheses: Python hands the function itself in as `cron`.
        bare: Any = cron
        where = f"{getattr(bare, '__module__', '?')}.{getattr(bare, '__qualname__', bare)}"
        raise JobDefinitionError(
            where, "cron", '@job needs cron=…: write @job(cron="0 9 * * *") (cron=None: a template)'
        )

    def register(func: Callable[..., Any]) -> Job:
        job_name = _check_name(
            name if name is not None else f"{func.__module__}.{func.__qualname__}"
        )
        policy = Policy(
            lease=policy_fields.duration(job_name, "lease", lease, minimum=MIN_LEASE),
            overlap=policy_fields.choice(job_name, "overlap", overlap, Overlap),
            timeout=policy_fields.optional_duration(job_name, "timeout", timeout),
            retries=policy_fields.count(job_name, "retries", retries, minimum=0),
            retry_backoff=policy_fields.duration(job_name, "retry_backoff", retry_backoff),
            isolation=policy_fields.choice(job_name, "isolation", isolation, Isolation),
            alert_after=policy_fields.optional_duration(job_name, "alert_after", alert_after),
            catchup=policy_fields.choice(job_name, "catchup", catchup, Catchup),
            catchup_window=policy_fields.duration(job_name, "catchup_window", catchup_window),
            catchup_limit=policy_fields.count(job_name, "catchup_limit", catchup_limit, minimum=1),
            catchup_budget=policy_fields.catchup_budget(job_name, "catchup_budget", catchup_budget),
            jitter=policy_fields.duration(job_name, "jitter", jitter),
            alert_after_failures=policy_fields.count(
                job_name, "alert_after_failures", alert_after_failures, minimum=1
            ),
            pause_after_failures=None
            if pause_after_failures is None
            else policy_fields.count(
                job_name, "pause_after_failures", pause_after_failures, minimum=1
            ),
            pool=(member := policy_fields.pool(job_name, pool)),
            concurrency_key=policy_fields.concurrency_key(job_name, concurrency_key, member),
        )
        if cron is not None and policy.concurrency_key is not None:
            try:
                policy_fields.key_for(job_name, policy.concurrency_key, {})
            except JobDefinitionError:
                raise JobDefinitionError(
                    job_name,
                    "concurrency_key",
                    f"{policy.concurrency_key!r} names an argument, and only a template's"
                    " schedules have arguments (cron=None)",
                ) from None
        return Job(
            name=job_name,
            func=func,
            schedule=_check_schedule(job_name, cron, timezone) if cron is not None else None,
            policy=policy,
            is_async=inspect.iscoroutinefunction(func),
            takes_context=_takes_context(job_name, func, template=cron is None),
            hooks=job_hooks(job_name, on),
            remote=_check_executor(job_name, executor, policy),
            calendars=job_calendars(job_name, calendar),
        )

    return register


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise JobDefinitionError(
            str(name), "name", "must be a non-empty string of ≤ 200 characters"
        )
    if name.startswith("@"):
        raise JobDefinitionError(
            name, "name", "must not begin with '@' (the runs of schedules created at run time)"
        )
    return name


def _check_schedule(name: str, cron: str, timezone: str) -> Schedule:
    try:
        return parse_schedule(cron, timezone)
    except ScheduleError as error:
        raise JobDefinitionError(name, error.field, error.message) from None


def _check_executor(name: str, executor: object, policy: Policy) -> Remote | None:
    """A remote executor is one of ours (`celery(...)`), checked against the job's name."""
    if executor is None:
        return None
    checked = getattr(executor, "checked", None)
    if not callable(checked):
        raise JobDefinitionError(
            name,
            "executor",
            f"must be celery(...) from scheduler.celery (or None to run here), got {executor!r}",
        )
    if policy.isolation is Isolation.PROCESS:
        raise JobDefinitionError(
            name,
            "isolation",
            "'process' cannot be combined with a remote executor: the worker is the isolation",
        )
    remote: Remote = checked(name)
    return remote


def _takes_context(name: str, func: Callable[..., Any], *, template: bool = False) -> bool:
    """Jobs take either nothing or one `RunContext`; anything else is a definition error.
    A template takes the RunContext as its first positional parameter, if it has one,
    and its schedules' arguments as keywords."""
    if not callable(func):
        raise JobDefinitionError(name, "function", f"{func!r} is not callable")
    if template:
        kinds = [parameter.kind for parameter in inspect.signature(func).parameters.values()]
        positional = [
            kind
            for kind in kinds
            if kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        ]
        if inspect.Parameter.POSITIONAL_ONLY in positional[1:]:
            raise JobDefinitionError(
                name, "function", "a template's arguments after the RunContext come by keyword"
            )
        return bool(positional) or inspect.Parameter.VAR_POSITIONAL in kinds
    required, declared = _parameter_counts(func)
    if required > 1:
        raise JobDefinitionError(name, "function", "must take no argument or one (the RunContext)")
    return declared > 0


def _parameter_counts(func: Callable[..., Any]) -> tuple[int, int]:
    """(positional parameters without a default, all parameters) of a callable.

    A plain function's code object says it directly; `inspect.signature` reads the same
    fields at twenty times the cost, which 10,000 jobs feel at start. Anything else
    (a wrapper, a partial, a callable object) goes through `inspect.signature`.
    """
    if (
        type(func) is FunctionType
        and not hasattr(func, "__wrapped__")
        and not hasattr(func, "__signature__")
    ):
        code = func.__code__
        positional = code.co_argcount
        declared = positional + code.co_kwonlyargcount
        declared += bool(code.co_flags & CO_VARARGS) + bool(code.co_flags & CO_VARKEYWORDS)
        return positional - len(func.__defaults__ or ()), declared
    parameters = inspect.signature(func).parameters
    required = [
        parameter
        for parameter in parameters.values()
        if parameter.default is inspect.Parameter.empty
        and parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD)
    ]
    return len(required), len(parameters)


def load_jobs(entries: Sequence[str]) -> dict[str, Job]:
    """Import each entry of `--jobs` (a module or package name, or the path of a file or
    a folder) and collect its jobs; an entry that defines none is refused."""
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    found: dict[str, Job] = {}
    for entry in entries:
        module_name = _module_for(entry)
        defined = [
            candidate
            for module in _import_all(module_name)
            for candidate in vars(module).values()
            if isinstance(candidate, Job)
        ]
        if not defined:
            raise UserError(
                f"--jobs: module {module_name!r} defines no job "
                "(no function decorated with @job); name the module that does"
            )
        for candidate in defined:
            known = found.get(candidate.name)
            if known is not None and known is not candidate:
                raise JobDefinitionError(
                    candidate.name,
                    "name",
                    f"defined twice ({known.func.__module__} and {candidate.func.__module__})",
                )
            found[candidate.name] = candidate
    pools_of(found.values())
    return found


def pools_of(jobs: Iterable[Job]) -> dict[str, Pool]:
    """The pools the jobs are members of, by name; two different pools of one name are a
    definition error naming the pool and the field they differ in."""
    pools: dict[str, Pool] = {}
    for candidate in jobs:
        member = candidate.policy.pool
        if member is None:
            continue
        known = pools.setdefault(member.name, member)
        for field_name in ("limit", "per_key"):
            if getattr(known, field_name) != getattr(member, field_name):
                raise PoolDefinitionError(
                    member.name,
                    field_name,
                    f"declared {getattr(known, field_name)!r} and {getattr(member, field_name)!r}"
                    f" (job {candidate.name!r}): one pool, one definition",
                )
    return pools


def importable(module_name: str) -> bool:
    """Whether a top-level module or package of that name can be found (not imported)."""
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    return importlib.util.find_spec(module_name) is not None


def looks_like_path(entry: str) -> bool:
    """`./jobs.py`, `src/tasks`, `/app/jobs`: a path; `myapp.jobs`: a module name."""
    return "/" in entry or "\\" in entry or entry.endswith(".py") or entry in (".", "..")


def _module_for(entry: str) -> str:
    """The module name to import for an entry; for a path, its folder goes on sys.path.

    A file or folder inside a package (folders with `__init__.py`) is imported as a
    module of that package, so its relative imports work.
    """
    if not looks_like_path(entry):
        return entry
    path = Path(entry).expanduser().resolve()
    if not path.exists():
        raise UserError(f"--jobs: no file or folder {entry!r} (looked from {Path.cwd()})")
    if path.is_file() and path.suffix != ".py":
        raise UserError(f"--jobs: {entry!r} is not a Python file (.py) or a folder")
    parts = [path.stem if path.is_file() else path.name]
    root = path.parent
    while (root / "__init__.py").is_file() and root.parent != root:
        parts.insert(0, root.name)
        root = root.parent
    for part in parts:
        if not part.isidentifier():
            raise UserError(
                f"--jobs: {entry!r} cannot be imported: {part!r} is not a Python name "
                "(use letters, digits and underscores)"
            )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    module_name = ".".join(parts)
    _check_origin(entry, module_name, path, _import(module_name))
    return module_name


def _check_origin(entry: str, module_name: str, path: Path, module: ModuleType) -> None:
    """The module imported under that name must be the file given, not another one
    (a `json.py` of yours would otherwise be the standard library's `json`)."""
    origins = [Path(location).resolve() for location in getattr(module, "__path__", [])]
    if getattr(module, "__file__", None):
        origin = Path(str(module.__file__)).resolve()
        origins.append(origin.parent if origin.name == "__init__.py" else origin)
    if path not in origins:
        where = origins[0] if origins else "a built-in module"
        raise UserError(
            f"--jobs: {entry!r}: the name {module_name!r} is already taken by {where}; "
            "rename the file or folder"
        )


def _import_all(module_name: str) -> Iterable[ModuleType]:
    """The module, and every module below it when it is a package."""
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
