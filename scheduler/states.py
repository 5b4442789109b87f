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


class Origin(StrEnum):
    """How a run came to be."""

    SCHEDULE = "schedule"
    CATCHUP = "catchup"
    MANUAL = "manual"
    BACKFILL = "backfill"
