"""Errors a user can act on, kept apart from our own bugs.

The CLI prints a `UserError` as one line on stderr and exits 2; anything else is a
bug in the scheduler and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """A mistake in the user's input: configuration, job definitions, the database."""


class ScheduleError(UserError):
    """A cron expression or time zone that cannot be used; `field` names the culprit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class JobDefinitionError(UserError):
    """A job whose definition is wrong; the message names the job and the field."""

    def __init__(self, job: str, field: str, message: str) -> None:
        super().__init__(f"job {job!r}: {field}: {message}")
        self.job = job
        self.field = field


class SchemaOutdatedError(UserError):
    """The database has no schema, or an older one than this code needs."""


class RunLostError(RuntimeError):
    """The run is no longer held by this attempt (its lease expired and another node took
    it, or it was abandoned): nothing more may be claimed or checkpointed for it. Not a
    user mistake: a job sees it from `once`, `item` and `checkpoint`."""


class ScheduleDefinitionError(UserError):
    """A schedule created at run time that cannot be used: the message names the
    schedule's key and the field, and nothing was written."""

    def __init__(self, key: str, field: str, message: str) -> None:
        super().__init__(f"schedule {key!r}: {field}: {message}")
        self.key = key
        self.field = field
        self.message = message
