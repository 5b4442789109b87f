"""A pool of driver connections, the same for both backends.

A node's threads (workers, heartbeat, catch-up, recovery) each borrow a connection for
one transaction and give it back. A few stay open between uses; bursts open more, up to
a bound, and those are closed when given back. A connection that failed, or was cut by
its call's deadline, is closed rather than lent again; one older than `recycle_s` is
replaced, so that a server-side idle limit or a pooler never hands back a stale one.

psycopg_pool would serve PostgreSQL alone (and keeps worker threads of its own); this
is the one pool both drivers share, kept as small as what it promises.

A `Share` caps how many of a pool's connections one kind of borrower holds at once: a
node's jobs (items, checkpoints) borrow through one, so that however many workers write
at once the node's own threads (claims, starts, outcomes, heartbeats) find the rest.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from scheduler.store.faults import StoreUnavailableError

Raw = TypeVar("Raw")
# How long a borrower waits for a connection when all are lent out.
CHECKOUT_TIMEOUT_S = 30.0
RECYCLE_S = 1800.0


@dataclass
class _Opened:
    at: float
    generation: int


class Share:
    """At most `most` connections lent at once to the borrowers that go through it."""

    def __init__(self, most: int, holders: str) -> None:
        self.most = max(most, 1)
        self._holders = holders  # who they are, for the error
        self._free = threading.Semaphore(self.most)

    def enter(self) -> None:
        """Wait for a place (as `Pool.borrow` waits for a connection)."""
        if not self._free.acquire(timeout=CHECKOUT_TIMEOUT_S):
            raise StoreUnavailableError(
                f"no database connection free after {CHECKOUT_TIMEOUT_S:g} s "
                f"({self.most} in use by {self._holders})"
            )

    def leave(self) -> None:
        self._free.release()


class Pool(Generic[Raw]):
    """Connections made by `connect`, closed by `close`; at most `most` open at once."""

    def __init__(
        self,
        connect: Callable[[], Raw],
        close: Callable[[Raw], None],
        *,
        kept: int,
        most: int,
        recycle_s: float = RECYCLE_S,
    ) -> None:
        self._connect, self._close = connect, close
        self._kept, self._most, self._recycle_s = kept, max(most, 1), recycle_s
        self._idle: list[Raw] = []
        self._opened: dict[int, _Opened] = {}  # id() of each open (or opening) connection
        self._generation = 0
        self._ready = threading.Condition()

    def borrow(self) -> Raw:
        """A connection for the caller alone until it is given back."""
        deadline = time.monotonic() + CHECKOUT_TIMEOUT_S
        stale: list[Raw] = []
        try:
            with self._ready:
                while True:
                    while self._idle:
                        raw = self._idle.pop()
                        if time.monotonic() - self._opened[id(raw)].at < self._recycle_s:
                            return raw
                        del self._opened[id(raw)]
                        stale.append(raw)
                    if len(self._opened) < self._most:
                        break
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise StoreUnavailableError(
                            f"no database connection free after {CHECKOUT_TIMEOUT_S:g} s "
                            f"({self._most} in use)"
                        )
                    self._ready.wait(left)
                # Counted before it is open, so that no other borrower goes past `most`.
                ticket = object()
                self._opened[id(ticket)] = _Opened(time.monotonic(), self._generation)
        finally:
            self._close_all(stale)
        try:
            raw = self._connect()
        except BaseException:
            with self._ready:
                del self._opened[id(ticket)]
                self._ready.notify()
            raise
        with self._ready:
            self._opened[id(raw)] = self._opened.pop(id(ticket))
        return raw

    def give_back(self, raw: Raw, *, broken: bool = False, lost: bool = False) -> None:
        """Return a borrowed connection; a broken one, one opened before `dispose`, or
        one past the kept few is closed. `lost`: it lost its server (the server went
        away, or the path to it): every idle one is suspect too and is closed, as by
        `dispose`, so that the next borrower learns at once how the server is now."""
        if lost:
            self.dispose()
        with self._ready:
            opened = self._opened.get(id(raw))
            keep = (
                not (broken or lost)
                and opened is not None
                and opened.generation == self._generation
                and len(self._idle) < self._kept
            )
            if keep:
                self._idle.append(raw)
            else:
                self._opened.pop(id(raw), None)
            self._ready.notify()
        if not keep:
            self._close_all([raw])

    def dispose(self) -> None:
        """Close every idle connection now, and each lent one when it is given back."""
        with self._ready:
            idle, self._idle = self._idle, []
            for raw in idle:
                del self._opened[id(raw)]
            self._generation += 1
            self._ready.notify_all()
        self._close_all(idle)

    def _close_all(self, connections: list[Raw]) -> None:
        for raw in connections:
            try:
                self._close(raw)
            except Exception:  # noqa: BLE001, S112 - one that fails to close is gone anyway
                continue
