"""A process's batch writes of its runs and its lease renewals take turns.

A renewal locks every row its holder holds; a start or an outcome batch locks some of
those rows too. Two statements that lock the same rows in different orders deadlock,
which PostgreSQL breaks only after `deadlock_timeout` (a second in which a start
already marked running has not begun, and the renewal that lost renewed nothing). The
batches could lock their rows in id order first, as the renewal does, but that lock is
a write of each row before its update: a third of the server's CPU for each run at a
peak (BENCHMARKS.md, n). Here, within the process, a renewal waits for the batches in
flight and holds new ones back until it commits, so they never meet; the batches run
beside each other, since no two of them write the same run (a start, then an outcome).

A waiting renewal goes first: a stream of batches at a peak must not keep a lease from
being renewed. Both sides enter before they open their transaction and leave after it
ends, so a thread waiting here holds no lock of the database. A thread that enters
again while inside (a batch within a batch) passes at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager


class BatchGate:
    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._batches = 0
        self._renewing = False
        self._renewals_waiting = 0
        # Whether the current thread is inside the gate (either side).
        self._inside = threading.local()

    def batch(self) -> AbstractContextManager[None]:
        """Around a transaction that writes many of the process's runs at once."""
        return self._turn(self._enter_batch, self._leave_batch)

    def renewal(self) -> AbstractContextManager[None]:
        """Around a transaction that renews every lease of a holder."""
        return self._turn(self._enter_renewal, self._leave_renewal)

    @contextmanager
    def _turn(self, enter: Callable[[], None], leave: Callable[[], None]) -> Iterator[None]:
        """`enter` and `leave` run under the condition's lock."""
        if getattr(self._inside, "held", False):
            yield
            return
        with self._changed:
            enter()
        self._inside.held = True
        try:
            yield
        finally:
            self._inside.held = False
            with self._changed:
                leave()

    def _enter_batch(self) -> None:
        while self._renewing or self._renewals_waiting:
            self._changed.wait()
        self._batches += 1

    def _leave_batch(self) -> None:
        self._batches -= 1
        if not self._batches:
            self._changed.notify_all()

    def _enter_renewal(self) -> None:
        self._renewals_waiting += 1
        try:
            while self._renewing or self._batches:
                self._changed.wait()
        except BaseException:  # given up waiting: the batches it held back may go
            self._changed.notify_all()
            raise
        finally:
            self._renewals_waiting -= 1
        self._renewing = True

    def _leave_renewal(self) -> None:
        self._renewing = False
        self._changed.notify_all()
