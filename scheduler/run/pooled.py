"""Runs this node holds that wait for a slot of their pool.

A pooled run whose start its pool's limits held back (`Started.POOLED`) is parked here:
claimed, its lease renewed like any run in hand, and on no worker thread. They are
tried again, oldest period first, as soon as a run of the pool ends here (`wake`), and
every POOL_POLL_S otherwise: a slot freed on another node, or by a dead holder's lease
ending, is found by that poll. Each try goes through the starter as a start would.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from typing import Generic, Protocol, TypeVar

from structlog.typing import FilteringBoundLogger

from scheduler.supervision import Worker

# How often parked runs are tried again when nothing here freed a slot.
POOL_POLL_S = 0.5
# At most this many of a pool's parked runs are tried at once, each key's oldest first:
# a try that cannot start parks them again.
TRIES_PER_POOL = 32


class Parkable(Protocol):
    @property
    def pool(self) -> str | None: ...

    @property
    def pool_key(self) -> str | None: ...

    @property
    def period(self) -> datetime: ...


Item = TypeVar("Item", bound=Parkable)


class PoolWaiters(Worker, Generic[Item]):
    """`relaunch(item)` hands a parked run back to the starter."""

    def __init__(self, relaunch: Callable[[Item], None], log: FilteringBoundLogger) -> None:
        super().__init__("pools", log)
        self._relaunch = relaunch
        self._parked: dict[str, list[Item]] = {}
        self._changed = threading.Condition()
        self._woken = False
        self._closed = False
        self.start()

    def park(self, item: Item) -> None:
        with self._changed:
            self._parked.setdefault(str(item.pool), []).append(item)

    def unpark(self, item: Item) -> bool:
        """Take a run out (given up, or the node drains); whether it was parked."""
        with self._changed:
            parked = self._parked.get(str(item.pool), [])
            kept = [other for other in parked if other is not item]
            self._parked[str(item.pool)] = kept
            return len(kept) < len(parked)

    def parked(self) -> list[Item]:
        with self._changed:
            return [item for items in self._parked.values() for item in items]

    def wake(self) -> None:
        """A slot of a pool may have freed: try the parked runs now."""
        with self._changed:
            self._woken = True
            self._changed.notify()

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify()

    def serve_one(self) -> bool:
        with self._changed:
            if not self._woken and not self._closed:
                self._changed.wait(POOL_POLL_S)
            if self._closed:
                return False
            self._woken = False
            tried = [item for pool in list(self._parked) for item in self._take(pool)]
        for item in tried:
            self._relaunch(item)
        return True

    def _take(self, pool: str) -> list[Item]:
        """The pool's parked runs to try now (lock held): oldest first, at most one per
        key until each key had its turn, TRIES_PER_POOL in all."""
        parked = sorted(self._parked.get(pool, []), key=lambda item: item.period)
        taken: list[Item] = []
        keys: set[str | None] = set()
        for item in parked:
            if len(taken) >= TRIES_PER_POOL:
                break
            if item.pool_key is not None and item.pool_key in keys:
                continue
            keys.add(item.pool_key)
            taken.append(item)
        chosen = {id(item) for item in taken}
        for item in parked:
            if len(taken) >= TRIES_PER_POOL:
                break
            if id(item) not in chosen:
                taken.append(item)
                chosen.add(id(item))
        self._parked[pool] = [item for item in parked if id(item) not in chosen]
        return taken
