"""What a job body can do under a harness that it cannot do for real on demand: take
virtual time, or have its node die under it at a chosen line."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Protocol

from scheduler.durations import Duration, parse_duration


class NodeDied(BaseException):
    """Raised by `crash_here()` inside a body: its node is gone. A BaseException, so that
    the job's own `except Exception` does not swallow it; the harness writes nothing for
    the run, which stays in hand under its live lease, as after a real death."""


class TimedOut(BaseException):
    """Raised by `elapse()` when the body's virtual time reaches its timeout: the
    executor stopped waiting for it there."""


class Body(Protocol):
    """The body a harness is running in this thread."""

    def elapse(self, duration: timedelta) -> None: ...

    def crash(self) -> None: ...


_local = threading.local()


def running(body: Body | None) -> None:
    """Set (or clear) the body this thread runs under a harness."""
    _local.body = body


def _current(what: str) -> Body:
    body: Body | None = getattr(_local, "body", None)
    if body is None:
        raise RuntimeError(
            f"scheduler.testing.{what}() is called from a job body that a Harness runs"
        )
    return body


def elapse(duration: Duration) -> None:
    """Let the running body take `duration` of virtual time: periods, retries and
    takeovers due meanwhile happen (claimed behind it), its lease is renewed as the
    heartbeat would, and past its timeout the body stops here, timed out."""
    _current("elapse").elapse(parse_duration(duration))


def crash_here() -> None:
    """The node running this body dies now: nothing more of the body runs, and the run
    stays in hand (running, its lease live) until recovery retakes it."""
    _current("crash_here").crash()


def crash_after(count: int) -> Callable[[], None]:
    """A callable that crashes the node on its `count`-th call (1: the first), for a
    body that should die after some of its work: `tick = crash_after(3)` then `tick()`
    after each unit."""
    calls = 0

    def tick() -> None:
        nonlocal calls
        calls += 1
        if calls == count:
            crash_here()

    return tick
