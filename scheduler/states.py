"""The words the runs table speaks, as enums: the strings are a public contract."""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    CLAIMED = "claimed"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    ABANDONED = "abandoned"
    SKIPPED = "skipped"
    MISSED = "missed"


ACTIVE_STATUSES = (RunStatus.CLAIMED, RunStatus.RUNNING)


class Reason(StrEnum):
    """Why a period was skipped, missed or abandoned."""

    OVERLAP = "overlap"
    PAUSED = "paused"
    CATCHUP = "catchup"
    WINDOW = "window"
    SHUTDOWN = "shutdown"
    LEASE_EXPIRED = "lease_expired"


class Origin(StrEnum):
    """How a run came to be."""

    SCHEDULE = "schedule"
    CATCHUP = "catchup"
    MANUAL = "manual"
    BACKFILL = "backfill"
