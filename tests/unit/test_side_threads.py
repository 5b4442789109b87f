"""A side thread sleeps until its step is due, is woken early on request, and ends
cleanly when its node stops (join and is_alive work: nothing of Thread's is shadowed)."""

from __future__ import annotations

import threading
import time

import structlog

from scheduler.supervision import SideThread


class Counting(SideThread):
    def __init__(self, stop: threading.Event) -> None:
        super().__init__("counting", stop, structlog.get_logger())
        self.steps: list[float] = []

    def step(self) -> float:
        self.steps.append(time.monotonic())
        return 3600.0


def test_woken_early_then_joined_after_the_stop() -> None:
    stop = threading.Event()
    thread = Counting(stop)
    thread.start()
    deadline = time.monotonic() + 5
    while not thread.steps and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(thread.steps) == 1, "the first step comes at once"
    thread.wake_in(0.0)
    while len(thread.steps) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(thread.steps) == 2, "a wake-up brings the next step forward"
    stop.set()
    thread.wake_in(0.0)
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert thread.failure is None
