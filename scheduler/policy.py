"""A job's policy: named choices and durations, validated once when the job is declared."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import TypeVar

from scheduler.durations import Duration, parse_duration
from scheduler.errors import JobDefinitionError


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
