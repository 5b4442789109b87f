"""Starting runs in batches as workers free up.

A run is marked running just before a worker calls its function. If each worker sent
that write itself, it would hold its slot through a round trip, and a node's start rate
would be its worker count divided by that round trip: in a burst the last runs of a
second would start late by a good part of it (bench c). Here one thread starts as many
waiting runs as there are idle workers, in one statement, and hands each started run to
a worker. It never starts more runs than there are idle workers, so `started_at` stays
the moment the function is called. A worker may also be set aside (`take`) for a run
that its claim starts: the daemon's on-time claims on PostgreSQL.

In a backlog (more runs waiting than workers idle) the starter lingers up to
BACKLOG_LINGER_S for more workers to free up before it sends a batch: each batch is a
transaction, and in a burst of short runs the machine's time goes to statements and
commits of a few runs each (bench b: 2.6 runs a batch, 3.3 s to the last start; with
the linger 5 runs a batch, 2.5 s). A run that finds an idle worker and no queue ahead
of it starts at once.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from structlog.typing import FilteringBoundLogger

from scheduler.supervision import Worker

Item = TypeVar("Item")
# How long the starter waits, in a backlog, for more idle workers to join a batch.
BACKLOG_LINGER_S = 0.005


class Starter(Worker, Generic[Item]):
    """`start(batch)` says, per item, whether it was started; `hand(item, started)` gives
    it to a worker, which calls `release()` when done. An item not started (its turn has
    not come, it was lost, or the database failed) is handed over all the same, for the
    worker to start the slow way, with its waiting and retries."""

    def __init__(
        self,
        workers: int,
        start: Callable[[Sequence[Item]], Sequence[bool]],
        hand: Callable[[Item, bool], None],
        log: FilteringBoundLogger,
    ) -> None:
        super().__init__("starter", log)
        self._start = start
        self._hand = hand
        self._waiting: deque[Item] = deque()
        self._idle = workers
        self._workers = workers
        self._changed = threading.Condition()
        self._closed = False
        self.start()

    def add(self, item: Item) -> None:
        with self._changed:
            self._waiting.append(item)
            self._changed.notify()

    def take(self, wanted: int) -> int:
        """Set aside up to `wanted` idle workers for runs that their claim starts, when
        no run waits for one (those come first); how many were set aside. Each is given
        back by `release`, or by the run it was given to."""
        with self._changed:
            if self._closed or self._waiting:
                return 0
            taken = min(wanted, self._idle)
            self._idle -= taken
            return taken

    def release(self) -> None:
        """A worker is free again."""
        with self._changed:
            self._idle += 1
            # The starter waits for a first idle worker while runs wait, or lingers for
            # enough of them: any other release would only wake it to wait again, a
            # context switch a run in a burst.
            if self._waiting and (
                self._idle == 1 or self._idle >= min(len(self._waiting), self._workers)
            ):
                self._changed.notify()

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify()

    def _linger(self) -> None:
        """In a backlog, wait a little for more idle workers (the lock held on entry)."""
        deadline = time.monotonic() + BACKLOG_LINGER_S
        while not self._closed and self._idle < min(len(self._waiting), self._workers):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._changed.wait(left)

    def serve_one(self) -> bool:
        with self._changed:
            while not self._closed and not (self._waiting and self._idle):
                self._changed.wait()
            if self._closed:
                return False
            self._linger()
            count = min(self._idle, len(self._waiting))
            batch = [self._waiting.popleft() for _ in range(count)]
            self._idle -= count
        # Past this point every item of the batch holds a worker slot: whatever fails,
        # each is handed over (or its slot released), so no slot leaks.
        try:
            started = list(self._start(batch))
        except Exception:  # noqa: BLE001 - a bug in one batch: its runs start the slow way
            self._log.exception("dispatch_crashed")
            started = [False] * len(batch)
        for item, ok in zip(batch, started, strict=True):
            try:
                self._hand(item, ok)
            except Exception:  # noqa: BLE001 - one bad hand-over must not stop the rest
                self._log.exception("dispatch_crashed")
                self.release()
        return True
