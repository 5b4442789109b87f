"""Group commit: many threads hand in small writes, one transaction carries them all.

A thread that finds no write in flight sends every request waiting at that moment,
its own included; those that arrive meanwhile wait and go together in the next one.
So a lone write costs one round trip as before, and under load the number of
transactions follows the database's speed instead of the number of runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar, cast

Request = TypeVar("Request")
Result = TypeVar("Result")

MAX_BATCH = 1000


class _Slot(Generic[Request, Result]):
    __slots__ = ("done", "error", "request", "result", "wake")

    def __init__(self, request: Request) -> None:
        self.request = request
        self.done = False
        self.result: Result | None = None
        self.error: Exception | None = None
        # Set when the slot is written, or when its thread must lead the next write.
        self.wake = threading.Event()

    def outcome(self) -> Result:
        if self.error is not None:
            raise self.error
        return cast(Result, self.result)  # set together with `done`


class GroupCommit(Generic[Request, Result]):
    """Batches calls of `write(requests) -> results` (one result per request, in order).

    When a batch fails, a request gets the batch's exception, except where `isolate`
    says the failure may lie in one request (bad data rather than a lost connection):
    then each is written alone, so one poisoned request cannot hold back the others.
    Each waiting thread is woken once, when its answer is there or its turn to lead
    has come, never all at once.
    """

    def __init__(
        self,
        write: Callable[[Sequence[Request]], Sequence[Result]],
        *,
        isolate: Callable[[Exception], bool],
        max_batch: int = MAX_BATCH,
    ) -> None:
        self._write = write
        self._isolate = isolate
        self._max_batch = max_batch
        self._pending: list[_Slot[Request, Result]] = []
        self._writing = False
        self._lock = threading.Lock()

    def submit(self, request: Request) -> Result:
        """Write `request` with whatever else is waiting; its result, or the exception."""
        slot: _Slot[Request, Result] = _Slot(request)
        with self._lock:
            self._pending.append(slot)
            leading = not self._writing
            self._writing = True
        if not leading:
            slot.wake.wait()
            if slot.done:
                return slot.outcome()
        # This thread leads until its own request is written, then hands over.
        while not slot.done:
            with self._lock:
                batch = self._pending[: self._max_batch]
                del self._pending[: self._max_batch]
            try:
                self._send(batch)
            finally:
                for written in batch:
                    if not written.done:  # interrupted by a BaseException
                        written.error, written.done = RuntimeError("write interrupted"), True
                    if written is not slot:
                        written.wake.set()
        with self._lock:
            if self._pending:
                self._pending[0].wake.set()
            else:
                self._writing = False
        return slot.outcome()

    def _send(self, batch: list[_Slot[Request, Result]]) -> None:
        try:
            results = self._write([slot.request for slot in batch])
        except Exception as error:  # noqa: BLE001 - handed to each caller to handle
            if len(batch) > 1 and self._isolate(error):
                for slot in batch:
                    self._send([slot])
                return
            for slot in batch:
                slot.error, slot.done = error, True
            return
        for slot, result in zip(batch, results, strict=True):
            slot.result, slot.done = result, True
