"""A side thread sleeps until its step is due, is woken early on request, and ends
cleanly when its node stops (join and is_alive work: nothing of Thread's is shadowed),
at once when the stop is a StopSignal."""

from __future__ import annotations

import threading
import time

import pytest
import structlog

from scheduler import supervision
from scheduler.supervision import SideThread, StopSignal


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


def test_a_stop_signal_wakes_a_sleeping_thread_that_never_looks_at_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a StopSignal the thread does not look at the stop now and then (which costs
    an idle node a wake-up a second per thread): the signal wakes it. A plain event, were
    it used here, would keep it asleep for the whole STOP_CHECK_S."""
    monkeypatch.setattr(supervision, "STOP_CHECK_S", 3600.0)
    stop = StopSignal()
    thread = Counting(stop)
    thread.start()
    deadline = time.monotonic() + 5
    while not thread.steps and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(thread.steps) == 1
    stop.set()
    thread.join(timeout=5)
    assert not thread.is_alive(), "the stop signal did not wake the thread"
    assert len(thread.steps) == 1


def test_a_stop_signal_already_set_stops_a_thread_at_once() -> None:
    stop = StopSignal()
    stop.set()
    thread = Counting(stop)
    thread.start()
    thread.join(timeout=5)
    assert not thread.is_alive()
