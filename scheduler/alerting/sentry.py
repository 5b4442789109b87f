"""Sentry Crons: a monitor per job, fed by check-ins from the node that holds the run.

Each period gets one check-in id (derived from its run id, so every node and attempt
names the same one): `in_progress` when its first attempt starts, `ok` when an attempt
succeeds, `error` when the last attempt fails. Only the holder sends them, after its
fenced start landed and after its outcome was written, so a period sends each state
once however many replicas run; an attempt that fails with a retry to come sends
nothing (the check-in stays in progress until the retry ends it). Missed periods are
Sentry's to see: the monitor carries the job's schedule, time zone, check-in margin and
maximum runtime.

Needs `sentry-sdk` (`cronclaim[sentry]`); the SDK sends from its own thread, so a slow
Sentry never holds a run.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import re
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

import sentry_sdk
from sentry_sdk.crons import capture_checkin

from scheduler.alerting.observer import Ending
from scheduler.model import Claim
from scheduler.registry import Job
from scheduler.states import RunStatus

if TYPE_CHECKING:
    from sentry_sdk._types import MonitorConfig

# Sentry's monitor slugs: lowercase letters, digits, `-` and `_`, at most 50 characters.
SLUG_LENGTH = 50
_NAMESPACE = uuid.UUID("6b1f8f3c-54a8-4f7e-9d63-5f3c0a8c2f11")


def monitor_slug(job: str) -> str:
    slug = re.sub(r"[^a-z0-9_-]+", "-", job.lower()).strip("-")
    return slug[:SLUG_LENGTH] or "job"


def check_in_id(run_id: str) -> str:
    """The period's check-in id: the same on every node and for every attempt."""
    return uuid.uuid5(_NAMESPACE, run_id).hex


def _minutes(span: timedelta) -> int:
    return max(1, math.ceil(span.total_seconds() / 60))


def monitor_config(job: Job) -> dict[str, Any]:
    """The monitor as Sentry upserts it from a check-in: schedule, time zone, margin (the
    job's `alert_after`, else a minute plus its jitter), max runtime (every attempt's
    timeout, or lease, plus the pauses between retries)."""
    policy, schedule = job.policy, job.timed
    fields = schedule.expression.split()
    if len(fields) == 5:
        plan: dict[str, Any] = {"type": "crontab", "value": schedule.expression}
    else:  # a seconds field or an alias: Sentry reads only five-field crontabs
        plan = {"type": "interval", "value": _minutes(_gap(job)), "unit": "minute"}
    margin = policy.alert_after or timedelta(minutes=1) + policy.jitter
    attempt = policy.timeout or policy.lease
    pauses = sum((policy.retry_backoff * 2**n for n in range(policy.retries)), timedelta(0))
    return {
        "schedule": plan,
        "timezone": schedule.timezone,
        "checkin_margin": _minutes(margin),
        "max_runtime": _minutes(attempt * policy.max_attempts + pauses),
    }


def _gap(job: Job) -> timedelta:
    first = job.timed.next_after(datetime.now(UTC))
    second = job.timed.next_after(first) if first else None
    return (second - first) if first and second else timedelta(minutes=1)


class SentryCrons:
    """The run observer that sends the check-ins (see the module's docstring)."""

    def __init__(self, monitors: Mapping[str, bool] | None = None) -> None:
        self._skip = {name for name, on in (monitors or {}).items() if not on}

    def sending(
        self, job: Job, claim: Claim, node: str, queue: str
    ) -> contextlib.AbstractContextManager[None] | None:
        """Nothing at the send: the worker that runs the attempt checks in."""
        return None

    def started(self, job: Job, claim: Claim, node: str) -> _CheckIns | None:
        # A schedule created at run time has no monitor: a million tenants' schedules
        # would be a million monitors. Its runs' failures reach Sentry's issues through
        # the job's hooks, not its Crons.
        if job.name in self._skip or job.template is not None or job.is_template:
            return None
        watch = _CheckIns(job, claim)
        if claim.starts_before == 0:
            watch.send("in_progress")
        return watch


class _CheckIns:
    def __init__(self, job: Job, claim: Claim) -> None:
        self._job = job
        self._claim = claim
        self.fields: dict[str, str] = {}

    def current(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def send(self, status: str, duration_ms: int | None = None) -> None:
        capture_checkin(
            monitor_slug=monitor_slug(self._job.name),
            check_in_id=check_in_id(self._claim.id),
            status=status,
            duration=None if duration_ms is None else duration_ms / 1000,
            monitor_config=cast("MonitorConfig", monitor_config(self._job)),
        )

    def ended(self, ending: Ending) -> None:
        if not ending.written:
            return  # not this attempt's any more: the node that has it will say
        if ending.status is RunStatus.SUCCEEDED:
            self.send("ok", ending.duration_ms)
        elif ending.final:
            self.send("error", ending.duration_ms)


def init_from_dsn(dsn: str, environment: str | None = None) -> None:
    """Start the SDK for check-ins only: no integrations, so it neither captures the
    node's own log lines nor installs an exception hook."""
    sentry_sdk.init(
        dsn=dsn,
        environment=environment,
        default_integrations=False,
        auto_enabling_integrations=False,
        traces_sample_rate=0.0,
    )
    # The SDK sends from a thread of its own; what is queued still goes at exit.
    atexit.register(sentry_sdk.flush, 2.0)
