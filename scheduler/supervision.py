"""The background threads of a node, and writes that must land, under a few rules:

- a side thread (heartbeat, recovery, catch-up, pruner, requests) repeats a step; if it
  dies it records why and stops the node, which must not run without it (`SideThread`);
- a worker thread (the starter, the outcome writer) serves a queue and must outlive a
  bug in any one item: the bug is logged and the loop goes on (`Worker`);
- a write the node owes the database (an outcome, a start, an abandon) is retried
  through faults with a doubling pause until it lands, and given up only once the node
  is closing and the database stays away, or when the database refuses the write itself
  (`persist`): the lease then ends and another node takes the period.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from structlog.typing import FilteringBoundLogger

from scheduler.store.faults import StoreError, StoreRejectedError

RETRY_FIRST_DELAY_S = 0.2
RETRY_MAX_DELAY_S = 5.0
# How often a sleeping side thread looks whether the node is stopping, when its stop is
# a plain event (a `StopSignal` wakes it instead).
STOP_CHECK_S = 1.0
T = TypeVar("T")


class Answered:
    """Told when the database answers again after a fault (the heartbeat's beat lands):
    every write backing off tries again at once instead of sleeping out its pause, so
    that an outcome lands, and a lease is renewed, while the lease still holds."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._count = 0

    def tell(self) -> None:
        with self._changed:
            self._count += 1
            self._changed.notify_all()

    def wait(self, timeout: float) -> None:
        """Sleep `timeout` seconds, or until told."""
        with self._changed:
            seen = self._count
            self._changed.wait_for(lambda: self._count != seen, timeout)


ANSWERED = Answered()


class Backoff:
    """The pause between tries of a write through database faults, doubling up to a
    ceiling, cut short when the database answers again (`ANSWERED`). Once the node is
    closing and the ceiling is reached the write is given up."""

    def __init__(self, closing: threading.Event) -> None:
        self.delay = RETRY_FIRST_DELAY_S
        self._closing = closing

    @property
    def exhausted(self) -> bool:
        return self._closing.is_set() and self.delay >= RETRY_MAX_DELAY_S

    def sleep(self) -> None:
        ANSWERED.wait(self.delay)
        self.delay = min(self.delay * 2, RETRY_MAX_DELAY_S)


def persist(
    write: Callable[[], T],
    *,
    log: FilteringBoundLogger,
    closing: threading.Event,
    default: T,
    **fields: object,
) -> T:
    """Run `write` until the database answers; `default` once it is given up (logged as
    `run_outcome_lost`). Each fault on the way is logged as `database_unavailable`."""
    backoff = Backoff(closing)
    while True:
        try:
            return write()
        except StoreError as error:
            if isinstance(error, StoreRejectedError) or backoff.exhausted:
                log.error("run_outcome_lost", error=error.message, **fields)
                return default
            log.warning(
                "database_unavailable", error=error.message, retry_in=backoff.delay, **fields
            )
            backoff.sleep()


class StopSignal(threading.Event):
    """A stop event that wakes the side threads asleep on it when it is set, so that an
    idle node's threads sleep until there is something to do instead of looking at it
    every second."""

    def __init__(self) -> None:
        super().__init__()
        self._listeners: list[Callable[[], None]] = []
        self._guard = threading.Lock()

    def on_set(self, wake: Callable[[], None]) -> None:
        with self._guard:
            self._listeners.append(wake)
        if self.is_set():
            wake()

    def set(self) -> None:
        super().set()
        with self._guard:
            listeners = list(self._listeners)
        for wake in listeners:
            wake()


class SideThread(threading.Thread):
    """Repeats `step()` until `stop` is set; `step` returns how long to wait before the
    next. `wake_in(seconds)` brings the next step forward (a notification, a deadline
    another thread learned of). A crash sets `halt` (the node's stop; by default `stop`
    itself)."""

    first_wait: float = 0.0

    def __init__(
        self,
        name: str,
        stop: threading.Event,
        log: FilteringBoundLogger,
        halt: threading.Event | None = None,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self._stopping = stop
        self._halt = halt or stop
        self._log = log
        self.failure: BaseException | None = None
        self._alarm = threading.Condition()
        self._wake_at = math.inf
        self._stop_check = STOP_CHECK_S
        if isinstance(stop, StopSignal):
            self._stop_check = math.inf
            stop.on_set(self._stopped)

    def _stopped(self) -> None:
        with self._alarm:
            self._alarm.notify()

    def run(self) -> None:
        try:
            wait = self.first_wait
            while not self._sleep(wait):
                wait = self.step()
        except Exception as error:  # noqa: BLE001 - supervision: any crash stops the node
            self.failure = error
            self._log.exception(f"{self.name}_crashed")
            self._halt.set()

    def step(self) -> float:
        raise NotImplementedError

    def wake_in(self, seconds: float = 0.0) -> None:
        """Take the next step within `seconds` at the latest."""
        with self._alarm:
            self._wake_at = min(self._wake_at, time.monotonic() + max(0.0, seconds))
            self._alarm.notify()

    def _sleep(self, seconds: float) -> bool:
        """Wait `seconds`, or less if woken; True once stopped."""
        deadline = time.monotonic() + seconds
        with self._alarm:
            while not self._stopping.is_set():
                remaining = min(deadline, self._wake_at) - time.monotonic()
                if remaining <= 0:
                    self._wake_at = math.inf
                    return False
                # A plain stop event cannot wake us: look at it now and then.
                timeout = min(remaining, self._stop_check)
                self._alarm.wait(None if math.isinf(timeout) else timeout)
        return True


class Worker(threading.Thread):
    """Calls `serve_one()` until it returns False; a bug in one call is logged as
    `dispatch_crashed` (with its traceback) and the next call comes all the same."""

    def __init__(self, name: str, log: FilteringBoundLogger) -> None:
        super().__init__(name=name, daemon=True)
        self._log = log

    def run(self) -> None:
        while True:
            try:
                if not self.serve_one():
                    return
            except Exception:  # noqa: BLE001 - this thread must outlive a bug in one item
                self._log.exception("dispatch_crashed")

    def serve_one(self) -> bool:
        raise NotImplementedError
