"""How a call of a job's function ended, as data the store and the log can hold."""

from __future__ import annotations

import threading
import traceback
from dataclasses import dataclass, field
from typing import Any

from structlog.tracebacks import extract

from scheduler.model import Failure
from scheduler.states import RunStatus

TRACEBACK_LIMIT = 4000
MESSAGE_LIMIT = 2000


@dataclass(frozen=True)
class Lingering:
    """A function that outlived its timeout in its thread and still runs there."""

    thread: threading.Thread
    # When it was called (this process's monotonic clock), and its timeout in seconds.
    began: float
    timeout: float


@dataclass(frozen=True)
class Outcome:
    status: RunStatus
    failure: Failure | None = None
    lingering: Lingering | None = field(default=None, compare=False)


SUCCEEDED = Outcome(RunStatus.SUCCEEDED)


def failed(error: BaseException) -> Outcome:
    """The job raised: any exception of its own, `TimeoutError`, `SystemExit` or another
    `BaseException` alike, is a failure of the attempt, never the scheduler's timeout."""
    return Outcome(RunStatus.FAILED, describe(error))


def timed_out(timeout: float) -> Outcome:
    """The scheduler's own deadline passed: only an executor that waited `timeout`
    seconds in vain says so."""
    return Outcome(
        RunStatus.TIMED_OUT,
        Failure(type="TimeoutError", message=f"did not finish within {timeout:g}s", traceback=""),
    )


def describe(error: BaseException) -> Failure:
    """A job's exception as stored data: its type (module-qualified, but a built-in's
    bare, as people write it), message and traceback tail; and for the log, the
    traceback as data (each exception of the chain with its frames, no locals)."""
    kind = type(error)
    name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )
    return Failure(
        type=storable(name),
        message=storable(str(error))[:MESSAGE_LIMIT],
        traceback=storable("".join(traceback.format_exception(error)))[-TRACEBACK_LIMIT:],
        trace=_trace(error),
    )


def _trace(error: BaseException) -> tuple[dict[str, Any], ...]:
    """structlog's dict form of a traceback (what `dict_tracebacks` logs), without the
    frames' local variables, which may hold secrets."""
    extracted = extract(type(error), error, error.__traceback__, show_locals=False)
    return tuple(
        {
            "exc_type": stack.exc_type,
            "exc_value": storable(stack.exc_value)[:MESSAGE_LIMIT],
            "is_cause": stack.is_cause,
            "frames": [
                {"filename": frame.filename, "lineno": frame.lineno, "name": frame.name}
                for frame in stack.frames
            ],
        }
        for stack in extracted.stacks
    )


def storable(text: str) -> str:
    """Text any database takes: PostgreSQL's cannot hold NUL, and no driver can encode a
    lone surrogate (what decoding bytes with errors="surrogateescape" leaves); a message
    carrying either must not wedge its outcome."""
    cleaned = text.replace("\x00", "\\x00")
    return cleaned.encode("utf-8", "backslashreplace").decode("utf-8")
