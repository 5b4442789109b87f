"""The batch writes of a process's runs and its renewals take turns (`store.batch_gate`):
batches run beside each other, a renewal runs alone, and a stream of batches never
keeps a renewal waiting past the batches already in flight (a lease must be renewed
at a peak too)."""

from __future__ import annotations

import threading
import time

from scheduler.store.batch_gate import BatchGate


def test_batches_run_beside_each_other() -> None:
    gate = BatchGate()
    inside = threading.Barrier(2, timeout=5)

    def batch() -> None:
        with gate.batch():
            inside.wait()  # breaks (and fails the test) unless both are in at once

    threads = [threading.Thread(target=batch) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert not inside.broken


def test_a_renewal_waits_for_the_batches_in_flight_and_runs_alone() -> None:
    gate = BatchGate()
    log: list[tuple[str, str]] = []
    entered, release = threading.Event(), threading.Event()

    def first_batch() -> None:
        with gate.batch():
            log.append(("batch", "in"))
            entered.set()
            release.wait(timeout=10)
            log.append(("batch", "out"))

    def enter(side: str) -> None:
        with gate.batch() if side == "batch" else gate.renewal():
            log.append((side, "in"))
            log.append((side, "out"))

    first = threading.Thread(target=first_batch)
    first.start()
    assert entered.wait(timeout=10)
    renewal = threading.Thread(target=enter, args=("renewal",))
    renewal.start()
    deadline = time.monotonic() + 10
    while gate._renewals_waiting == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    later = threading.Thread(target=enter, args=("batch",))
    later.start()
    time.sleep(0.1)
    # Neither enters while the first batch is in: the later batch waits behind the
    # renewal, not beside the first batch.
    assert log == [("batch", "in")]
    release.set()
    for thread in (first, renewal, later):
        thread.join(timeout=10)
    assert log == [
        ("batch", "in"),
        ("batch", "out"),
        ("renewal", "in"),
        ("renewal", "out"),
        ("batch", "in"),
        ("batch", "out"),
    ]


def test_a_stream_of_batches_does_not_starve_a_renewal() -> None:
    gate = BatchGate()
    stop = threading.Event()

    def stream() -> None:
        while not stop.is_set():
            with gate.batch():
                time.sleep(0.01)

    streams = [threading.Thread(target=stream) for _ in range(4)]
    for thread in streams:
        thread.start()
    # A starved renewal would enter only once the stream ends, 5 s from now.
    ending = threading.Timer(5, stop.set)
    ending.start()
    try:
        time.sleep(0.1)  # the batches overlap each other from here on
        waited = []
        for _ in range(5):
            asked = time.monotonic()
            with gate.renewal():
                waited.append(time.monotonic() - asked)
    finally:
        ending.cancel()
        stop.set()
        for thread in streams:
            thread.join(timeout=10)
    # Each renewal waits for the batches in flight (10 ms each), not for the stream.
    assert max(waited) < 0.5, waited


def test_a_thread_inside_enters_again_at_once() -> None:
    gate = BatchGate()
    entered = threading.Event()

    def renew() -> None:
        with gate.renewal():
            pass

    with gate.batch():
        waiting = threading.Thread(target=renew)
        waiting.start()
        time.sleep(0.05)  # a renewal now waits: a new batch would wait behind it
        with gate.batch():
            entered.set()
    assert entered.is_set()
    waiting.join(timeout=5)
    assert not waiting.is_alive()
