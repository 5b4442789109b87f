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
