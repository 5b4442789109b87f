"""A job's policy: named choices and durations, validated once when the job is declared."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import TypeVar

from scheduler.durations import Duration, parse_duration
from scheduler.errors import JobDefinitionError, UserError


class Overlap(StrEnum):
    """What a period does when the job's previous period is still running."""

    SKIP = "skip"
    QUEUE = "queue"
    ALLOW = "allow"

    @property
    def limit(self) -> int | None:
        """How many runs may occupy the job when a period is claimed before that period is
        recorded skipped: its predecessor for `skip`, one more waiting for `queue`; None
        (any) for `allow`."""
        if self is Overlap.ALLOW:
            return None
        return 1 if self is Overlap.SKIP else 2


class Catchup(StrEnum):
    """What happens to periods that passed while no node was running."""

    ALL = "all"
    LATEST = "latest"
    NONE = "none"


class Isolation(StrEnum):
    THREAD = "thread"
    PROCESS = "process"


MIN_LEASE = timedelta(seconds=2)
E = TypeVar("E", bound=StrEnum)


class PoolDefinitionError(UserError):
    """A pool that cannot work; the message names it and the field."""

    def __init__(self, name: str, field: str, message: str) -> None:
        super().__init__(f"pool {name!r}: {field}: {message}")


@dataclass(frozen=True)
class Pool:
    """A named limit on how many runs of its member jobs and schedules run at once across
    the fleet: `Pool("reports", limit=4)`, and with `per_key=1` at most one run per
    concurrency key (a tenant) among them. A member's period that finds it full waits,
    claimed, and starts in order as a slot frees. The limits here are the code's; an
    operator may change them at run time (`scheduler pools set`)."""

    name: str
    limit: int
    per_key: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip() or len(self.name) > 200:
            raise PoolDefinitionError(
                str(self.name), "name", "must be a non-empty string of ≤ 200 characters"
            )
        for field, value in (("limit", self.limit), ("per_key", self.per_key)):
            if value is None and field == "per_key":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PoolDefinitionError(
                    self.name, field, f"must be a whole number ≥ 1, got {value!r}"
                )


def admitted(
    limit: int,
    per_key: int | None,
    running: Iterable[str | None],
    waiting: Iterable[tuple[str, str | None]],
    wanted: str,
) -> bool:
    """Whether the run `wanted` (an id) may start now in a pool whose running members hold
    `running` keys, with `waiting` (id, key) its members' waiting runs in order, `wanted`
    among them. Slots go in that order to each waiting run whose key has room: a run held
    back by its own key's cap does not hold back the runs behind it, so one tenant cannot
    take the pool, and no run ever starts past either limit."""
    used = 0
    by_key: dict[str, int] = {}
    for key in running:
        used += 1
        if key is not None:
            by_key[key] = by_key.get(key, 0) + 1
    for run_id, key in waiting:
        if used >= limit:
            return False
        if key is not None and per_key is not None and by_key.get(key, 0) >= per_key:
            if run_id == wanted:
                return False
            continue
        if run_id == wanted:
            return True
        used += 1
        if key is not None:
            by_key[key] = by_key.get(key, 0) + 1
    return False


@dataclass(frozen=True)
class CatchupBudget:
    """`runs` catch-up starts per `per`, spread evenly: one each `pace`."""

    runs: int
    per: timedelta

    @property
    def pace(self) -> timedelta:
        return self.per / self.runs

    def __str__(self) -> str:
        return f"{self.runs}/{self.per.total_seconds():g}s"


@dataclass(frozen=True)
class Policy:
    lease: timedelta = timedelta(seconds=30)
    overlap: Overlap = Overlap.SKIP
    timeout: timedelta | None = None
    retries: int = 0
    retry_backoff: timedelta = timedelta(seconds=10)
    isolation: Isolation = Isolation.THREAD
    alert_after: timedelta | None = None
    catchup: Catchup = Catchup.ALL
    catchup_window: timedelta = timedelta(days=1)
    catchup_limit: int = 1000
    jitter: timedelta = timedelta(0)
    # A failure streak: the `failed` event is born when this many periods in a row have
    # failed (once per streak), and the job is paused when `pause_after_failures` have.
    alert_after_failures: int = 1
    pause_after_failures: int | None = None
    # At most this many catch-up runs start per window, one per pace; the periods past
    # it are recorded `deferred (budget)` for an operator to run or skip.
    catchup_budget: CatchupBudget | None = None
    # Runs at most `pool.limit` at once with the pool's other members, fleet-wide, and at
    # most `pool.per_key` of them with the same `concurrency_key` (formatted with a
    # schedule's arguments: "{tenant}").
    pool: Pool | None = None
    concurrency_key: str | None = None

    @property
    def heartbeat(self) -> timedelta:
        """Renew a third of the way into the lease, so two renewals may fail safely."""
        return self.lease / 3

    @property
    def max_attempts(self) -> int:
        return self.retries + 1

    @property
    def overdue_after(self) -> timedelta:
        """How long after its period a run may go without succeeding before `check` alerts."""
        if self.alert_after is not None:
            return self.alert_after
        return self.lease + self.jitter + (self.timeout or timedelta(0))


def duration(
    job: str, field: str, value: Duration, *, minimum: timedelta = timedelta(0)
) -> timedelta:
    try:
        parsed = parse_duration(value)
    except ValueError as error:
        raise JobDefinitionError(job, field, str(error)) from None
    if parsed < minimum:
        raise JobDefinitionError(
            job, field, f"must be at least {minimum.total_seconds():g}s, got {value!r}"
        )
    return parsed


def optional_duration(job: str, field: str, value: Duration | None) -> timedelta | None:
    if value is None:
        return None
    parsed = duration(job, field, value)
    if not parsed:
        raise JobDefinitionError(job, field, f"must be more than zero, got {value!r}")
    return parsed


def choice(job: str, field: str, value: str, kind: type[E]) -> E:
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(repr(member.value) for member in kind)
        raise JobDefinitionError(job, field, f"must be one of {allowed}, got {value!r}") from None


def count(job: str, field: str, value: object, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise JobDefinitionError(job, field, f"must be a whole number ≥ {minimum}, got {value!r}")
    return value


def catchup_budget(job: str, field: str, value: object) -> CatchupBudget | None:
    """`"10/1h"`, or `(10, "1h")`: at most 10 catch-up runs an hour."""
    if value is None:
        return None
    if isinstance(value, CatchupBudget):
        return value
    if isinstance(value, str) and value.count("/") == 1:
        runs_text, per = value.split("/")
        runs: object = int(runs_text) if runs_text.strip().isdigit() else runs_text
    elif isinstance(value, tuple) and len(value) == 2:
        runs, per = value
    else:
        raise JobDefinitionError(
            job, field, f'must be "RUNS/DURATION" (e.g. "10/1h") or (RUNS, DURATION), got {value!r}'
        )
    counted = count(job, field, runs, minimum=1)
    window = duration(job, field, per, minimum=timedelta(seconds=1))
    return CatchupBudget(counted, window)


def pool(job: str, value: object) -> Pool | None:
    """`@job(pool=...)`: a `Pool`, or None."""
    if value is None or isinstance(value, Pool):
        return value
    raise JobDefinitionError(
        job, "pool", f'must be a Pool (scheduler.Pool("name", limit=N)), got {value!r}'
    )


def concurrency_key(job: str, value: object, member: Pool | None) -> str | None:
    """`@job(concurrency_key=...)`: a string (a template's may name its schedules'
    arguments, "{tenant}"), only with a pool."""
    if value is None:
        return None
    if member is None:
        raise JobDefinitionError(job, "concurrency_key", "needs a pool (pool=Pool(...))")
    if not isinstance(value, str) or not value.strip() or len(value) > 200:
        raise JobDefinitionError(
            job, "concurrency_key", f"must be a non-empty string of ≤ 200 characters, got {value!r}"
        )
    try:
        value.format_map(_Names())
    except (ValueError, IndexError) as error:
        raise JobDefinitionError(
            job, "concurrency_key", f"is not a valid template: {error}"
        ) from None
    return value


class _Names(dict[str, str]):
    """Any name a key template uses (checked for its syntax alone)."""

    def __missing__(self, name: str) -> str:
        return name


def key_for(job: str, template: str | None, args: Mapping[str, object]) -> str | None:
    """A run's concurrency key: the template with a schedule's arguments in it. A name the
    arguments lack is a JobDefinitionError naming the field (a schedule's creation is
    refused on it)."""
    if template is None:
        return None
    try:
        return template.format_map(dict(args))
    except KeyError as missing:
        raise JobDefinitionError(
            job, "concurrency_key", f"the arguments hold no {missing}"
        ) from None
    except (ValueError, IndexError, AttributeError) as error:
        raise JobDefinitionError(job, "concurrency_key", str(error)) from None
