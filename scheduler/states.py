"""The words the runs table speaks, as enums: the strings are a public contract."""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    CLAIMED = "claimed"
    # Handed to a task queue: its message is sent, no worker has started it yet.
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    ABANDONED = "abandoned"
    SKIPPED = "skipped"
    MISSED = "missed"
    # Owed by catch-up but past the job's catch-up budget: not run until an operator says
    # run (reason `approved`, then a node claims it) or skip (`skipped (budget)`).
    DEFERRED = "deferred"


ACTIVE_STATUSES = (RunStatus.CLAIMED, RunStatus.QUEUED, RunStatus.RUNNING)


class Reason(StrEnum):
    """Why a period was skipped, missed or abandoned."""

    OVERLAP = "overlap"
    PAUSED = "paused"
    CATCHUP = "catchup"
    WINDOW = "window"
    SHUTDOWN = "shutdown"
    LEASE_EXPIRED = "lease_expired"
    # Its message waited in the task queue past its deadline (or was never delivered).
    QUEUE_EXPIRED = "queue_expired"
    # It falls on a day the job's calendar excludes (`@job(calendar=...)`).
    CALENDAR = "calendar"
    # Past the job's catch-up budget (`@job(catchup_budget=...)`): deferred, or skipped
    # by an operator's decision.
    BUDGET = "budget"
    # A deferred period an operator chose to run: the next catch-up pass claims it.
    APPROVED = "approved"
    # Late, within its catch-up budget, it waits its turn at the budget's pace (a
    # schedule created at run time): the catch-up loop claims it then.
    PACED = "paced"
    # Claimed, it waits for a slot of its pool (`@job(pool=...)`): `waiting (pool)`.
    POOL = "pool"


class Origin(StrEnum):
    """How a run came to be."""

    SCHEDULE = "schedule"
    CATCHUP = "catchup"
    MANUAL = "manual"
    BACKFILL = "backfill"


class EventKind(StrEnum):
    """What an alert hook hears about (the `kind` of `scheduler_events`)."""

    # The last attempt failed or timed out, and that made `alert_after_failures` periods
    # in a row (once per streak: the next is born after a `recovered`).
    FAILED = "failed"
    RETRYING = "retrying"  # an attempt failed and another is due
    TIMED_OUT = "timed_out"  # an attempt passed its timeout (with or without a retry)
    MISSED = "missed"  # periods passed while no node ran and catch-up will not run them
    SKIPPED = "skipped"  # a period not run because the job was still running (overlap)
    RECOVERED = "recovered"  # the first success after a `failed` event
    STUCK_ITEM = "stuck_item"  # an item claimed by an attempt that ended without it
    PAUSED = "paused"  # the scheduler paused the job: `pause_after_failures` in a row
    # A calendar of dates the job skips ends within 30 days (once per calendar and date).
    CALENDAR_ENDING = "calendar_ending"
    # Catch-up deferred periods past the job's budget (one event per catch-up write).
    DEFERRED = "deferred"


class Delivery(StrEnum):
    """Where an event's delivery stands."""

    PENDING = "pending"  # a node will (again) try its hooks
    DELIVERED = "delivered"  # every hook took it
    FAILED = "failed"  # tries ran out; `last_error` says why
    # No hook listens to this kind for this job, or nobody has run the job for a day.
    UNROUTED = "unrouted"


def status_text(status: str, reason: str | None) -> str:
    """A run's status as the views say it: `skipped (overlap)`, and `waiting (pool)` for a
    run claimed whose start its pool's limits held back."""
    if status == "claimed" and reason == "pool":
        return "waiting (pool)"
    return f"{status} ({reason})" if reason else status
