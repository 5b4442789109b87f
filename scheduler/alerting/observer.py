"""What a run observer is (a trace span, a Sentry check-in): the run path tells it when
an attempt's function is about to be called on the holder, and how the attempt ended,
and, for a job that runs on a task queue, when the node sends the attempt's message
(`scheduler.run.observers` does the telling, and keeps an observer's failure away from
the run)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from scheduler.model import Claim, Failure
from scheduler.registry import Job
from scheduler.states import RunStatus


@dataclass(frozen=True)
class Ending:
    """How an attempt ended, as an observer needs it. `written`: the outcome landed (False
    when the run was no longer this attempt's); `final`: no retry is to come."""

    status: RunStatus
    failure: Failure | None
    final: bool
    written: bool
    duration_ms: int | None


class Watch(Protocol):
    """One observer's watch over one attempt."""

    @property
    def fields(self) -> Mapping[str, str]:
        """Fields for every log line of the run (a trace's ids); empty for none."""

    def current(self) -> contextlib.AbstractContextManager[None]:
        """Entered around the call, in the thread that makes it."""

    def ended(self, ending: Ending) -> None: ...


class RunObserver(Protocol):
    """An observer may also have `idle() -> bool`, asked at each start: True leaves it
    out of that attempt (a tracer with no provider set up; see `run.observers.live`)."""

    def started(self, job: Job, claim: Claim, node: str) -> Watch | None:
        """The attempt's function is about to be called here; None to not watch it."""

    def sending(
        self, job: Job, claim: Claim, node: str, queue: str
    ) -> contextlib.AbstractContextManager[None] | None:
        """Entered around the send of a remote attempt's message (so that a trace's
        context can travel in it); None when the observer has nothing to do there."""
