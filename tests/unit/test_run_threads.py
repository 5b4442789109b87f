"""The threads that call a node's runs: started only as calls need them, never more
than the worker count, reused when idle; shut down, they drop what has not begun."""

from __future__ import annotations

import threading
import time

import pytest

from scheduler.run.threads import RunThreads

WAIT_S = 10


def named(prefix: str) -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith(prefix)]


def test_threads_start_as_calls_need_them_up_to_the_count() -> None:
    threads = RunThreads(3, "grow")
    assert named("grow_") == []
    gate, lock = threading.Event(), threading.Lock()
    running: list[int] = []
    most = [0]

    def hold(number: int) -> None:
        with lock:
            running.append(number)
            most[0] = max(most[0], len(running))
        gate.wait(WAIT_S)
        with lock:
            running.remove(number)

    for number in range(5):
        threads.submit(hold, number)
    deadline = time.monotonic() + WAIT_S
    while len(running) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)  # a fourth call would have begun by now, had it a thread
    assert (len(running), len(named("grow_"))) == (3, 3)
    gate.set()
    while running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert (running, most[0], len(named("grow_"))) == ([], 3, 3)
    threads.shutdown()


def test_an_idle_thread_takes_the_next_call() -> None:
    threads = RunThreads(8, "reuse")
    for _ in range(10):
        done = threading.Event()
        threads.submit(done.set)
        assert done.wait(WAIT_S)
        time.sleep(0.01)  # the thread is back on the queue
    assert len(named("reuse_")) == 1
    threads.shutdown()


def test_shut_down_calls_not_begun_are_dropped_and_new_ones_refused() -> None:
    threads = RunThreads(1, "drop")
    began, gate = threading.Event(), threading.Event()
    later: list[int] = []

    def hold() -> None:
        began.set()
        gate.wait(WAIT_S)

    threads.submit(hold)
    assert began.wait(WAIT_S)
    threads.submit(later.append, 1)
    threads.submit(later.append, 2)
    threads.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        threads.submit(later.append, 3)
    gate.set()
    (thread,) = named("drop_")
    thread.join(WAIT_S)
    assert (thread.is_alive(), later) == (False, [])


def test_a_call_that_raises_leaves_its_thread_serving() -> None:
    threads = RunThreads(1, "raise")
    served: list[str] = []

    def leave() -> None:
        raise SystemExit(3)

    for call in (leave, lambda: served.append(threading.current_thread().name)):
        threads.submit(call)
    deadline = time.monotonic() + WAIT_S
    while not served and time.monotonic() < deadline:
        time.sleep(0.01)
    assert served == ["raise_0"]
    threads.shutdown()


def test_warmed_threads_are_started_ahead_up_to_the_count_and_then_reused() -> None:
    threads = RunThreads(4, "warm")
    threads.warm(2)
    assert sorted(thread.name for thread in named("warm_")) == ["warm_0", "warm_1"]
    threads.warm(10)
    assert len(named("warm_")) == 4
    threads.warm(1)  # fewer than it has: nothing to start
    assert len(named("warm_")) == 4
    done = [threading.Event() for _ in range(4)]
    for event in done:
        threads.submit(event.set)
    assert all(event.wait(WAIT_S) for event in done)
    assert sorted(thread.name for thread in named("warm_")) == [f"warm_{n}" for n in range(4)]
    threads.shutdown()
    for thread in named("warm_"):
        thread.join(WAIT_S)
    assert named("warm_") == []
