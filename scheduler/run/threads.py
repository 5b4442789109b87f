"""The threads that call a node's runs.

`concurrent.futures.ThreadPoolExecutor` makes a Future and a work item for every call,
and its idle count is a semaphore built on a condition, taken on each call and given
back after it: a few µs a run on a path a burst takes ten thousand times, for results
nobody reads (a run reports its end through the dispatcher). Here a call is a tuple on
one queue that the threads block on, and a thread is started only when every thread
there is busy, up to the worker count, or ahead of many runs due at once (`warm`): an
idle node keeps none it never needed.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

Call = tuple[Callable[..., object], tuple[Any, ...]]


class RunThreads:
    def __init__(self, count: int, prefix: str) -> None:
        self._calls: queue.SimpleQueue[Call | None] = queue.SimpleQueue()
        self._count = count
        self._prefix = prefix
        self._lock = threading.Lock()
        self._threads = 0
        self._busy = 0  # calls submitted and not yet returned
        self._closed = False

    def submit(self, function: Callable[..., object], *args: Any) -> None:
        """Call `function(*args)` on one of the threads; RuntimeError once shut down."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the run threads are shut down")
            self._busy += 1
            grow = self._busy > self._threads and self._threads < self._count
            if grow:
                self._threads += 1
                number = self._threads - 1
        if grow:
            self._start(number)
        self._calls.put((function, args))

    def warm(self, calls: int) -> None:
        """Start the threads that `calls` submitted at once would need, now: starting a
        thread waits for it to run, which in a burst means waiting for the GIL behind
        the claims and runs of the burst itself."""
        with self._lock:
            if self._closed:
                return
            first = self._threads
            self._threads = max(first, min(calls, self._count))
            last = self._threads
        for number in range(first, last):
            self._start(number)

    def _start(self, number: int) -> None:
        threading.Thread(target=self._serve, name=f"{self._prefix}_{number}", daemon=True).start()

    def shutdown(self) -> None:
        """Calls not yet begun are dropped; each thread ends after the call it is in."""
        with self._lock:
            self._closed = True
            threads = self._threads
        while True:
            try:
                self._calls.get_nowait()
            except queue.Empty:
                break
        for _ in range(threads):
            self._calls.put(None)

    def _serve(self) -> None:
        while (call := self._calls.get()) is not None:
            function, args = call
            try:
                function(*args)
            except BaseException:  # noqa: BLE001, S110
                # Dropped, as the executor dropped it into a Future nobody read: the
                # dispatcher reports its own failures, and a job's SystemExit must not
                # cost the node a worker.
                pass
            finally:
                with self._lock:
                    self._busy -= 1
