"""The seam for what watches a run from outside (a trace span, a Sentry check-in): told
when the attempt's function is about to be called on this node (or on a task queue's
worker), how it ended, and when a node sends a remote attempt's message.

Only the holder calls them, after its fenced start landed and after its outcome was
settled, so they see each attempt once across the fleet. An observer's own failure
is logged (`observer_failed`) and never reaches the run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from structlog.typing import FilteringBoundLogger

from scheduler.alerting.observer import Ending, RunObserver, Watch
from scheduler.model import Claim
from scheduler.registry import Job

__all__ = ["Ending", "RunObserver", "Watch", "Watching", "begin", "live", "sending"]


@dataclass
class Watching:
    """Every observer's watch over one attempt, each kept from breaking the run."""

    watches: list[Watch]
    log: FilteringBoundLogger
    fields: dict[str, str] = field(default_factory=dict)
    done: bool = False

    def current(self) -> contextlib.AbstractContextManager[None]:
        """Every watch's part around the call (none to enter for most runs: no cost)."""
        return self._entered() if self.watches else contextlib.nullcontext()

    @contextlib.contextmanager
    def _entered(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for watch in self.watches:
                try:
                    stack.enter_context(watch.current())
                except Exception:
                    self.log.exception("observer_failed", stage="call")
            yield

    def ended(self, ending: Ending) -> None:
        if self.done:
            return
        self.done = True
        for watch in self.watches:
            try:
                watch.ended(ending)
            except Exception:
                self.log.exception("observer_failed", stage="ended")


def live(observers: Sequence[RunObserver]) -> list[RunObserver]:
    """The observers that would watch an attempt started now. One that says it is idle
    (`idle()`: a tracer with no provider set up, whose spans would be no-ops) is left
    out, so that a node nothing watches takes the run path of a node with no observer:
    its run_started lines said together by the starter, no watch made a run."""
    return [observer for observer in observers if not _idle(observer)]


def _idle(observer: RunObserver) -> bool:
    idle = getattr(observer, "idle", None)
    return bool(idle()) if callable(idle) else False


def begin(
    observers: Sequence[RunObserver], job: Job, claim: Claim, node: str, log: FilteringBoundLogger
) -> Watching:
    """Start every observer's watch over an attempt about to be called here."""
    watches: list[Watch] = []
    fields: dict[str, str] = {}
    for observer in observers:
        try:
            watch = observer.started(job, claim, node)
        except Exception:
            log.exception("observer_failed", stage="started")
            continue
        if watch is not None:
            watches.append(watch)
            fields.update(watch.fields)
    return Watching(watches, log, fields)


@contextlib.contextmanager
def sending(
    observers: Sequence[RunObserver],
    job: Job,
    claim: Claim,
    node: str,
    queue: str,
    *,
    log: FilteringBoundLogger,
) -> Iterator[None]:
    """Every observer's part in the send of a remote attempt's message (the send's own
    error passes through them, so a span can record it)."""
    with contextlib.ExitStack() as stack:
        for observer in observers:
            try:
                around = observer.sending(job, claim, node, queue)
                if around is not None:
                    stack.enter_context(around)
            except Exception:
                log.exception("observer_failed", stage="sending")
        yield
