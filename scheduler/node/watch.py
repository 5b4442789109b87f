"""The watch: this node waits on the next node's liveness lock, and tells every node
the moment that node's process has ended.

The nodes that hold a liveness lock form a ring in id order; each watches the one after
it (a second node watches the first, a lone node none). The wait is a lock request on a
connection of its own (`store.liveness.PeerWatch`): no statement is sent while it
waits, and the server grants it the instant the watched session ends. The watcher then
notifies `gone`, and every node's recovery loop looks at once (and judges whether it is
a death: a session that merely ended is no proof, see `scheduler.node.recovery`).

A ring that changes (a node joins or leaves) interrupts the wait and picks the new
neighbour. If the watcher and its neighbour die together, the watcher's own watcher
sees the first and the recovery pass finds both; should every notice be lost, the
next heartbeat of any node reads the nodes gone anyway.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from structlog.typing import FilteringBoundLogger

from scheduler.store import nodes
from scheduler.store import wakeups as store_wakeups
from scheduler.store.database import Database
from scheduler.store.faults import StoreError
from scheduler.store.nodes import Watched
from scheduler.supervision import SideThread

RETRY_S = 1.0
# With nobody to watch, wait for the next heartbeat's ring.
IDLE_S = 300.0


if TYPE_CHECKING:
    from scheduler.store.liveness import PeerWatch


class Watch(SideThread):
    def __init__(
        self,
        *,
        database: Database,
        node_id: str,
        peer_watch: PeerWatch,
        stop: threading.Event,
        log: FilteringBoundLogger,
    ) -> None:
        super().__init__("watch", stop, log)
        self._database = database
        self._node_id = node_id
        self._peer_watch = peer_watch
        self._lock = threading.Lock()
        self._ring: list[Watched] = []
        self._target: Watched | None = None
        # Nodes seen gone by this watch: not waited on again.
        self._seen_gone: set[tuple[str, int]] = set()

    def ring(self, nodes: list[Watched]) -> None:
        """The nodes that hold a liveness lock now (from a heartbeat)."""
        with self._lock:
            self._ring = list(nodes)
            target = self._next()
            changed = target != self._target
        if changed:
            # The cancel is a connection of its own to the server (up to a connect
            # timeout): never on the heartbeat's thread, whose renewals must not wait.
            threading.Thread(
                target=self._peer_watch.interrupt, name="watch-interrupt", daemon=True
            ).start()
            self.wake_in(0.0)

    def _next(self) -> Watched | None:
        """The neighbour after this node in id order, wrapping round; not itself."""
        candidates = [
            node
            for node in self._ring
            if node.id != self._node_id and (node.id, node.key) not in self._seen_gone
        ]
        if not candidates:
            return None
        after = [node for node in candidates if node.id > self._node_id]
        return (after or candidates)[0]

    def step(self) -> float:
        with self._lock:
            self._target = target = self._next()
        if target is None:
            return IDLE_S
        try:
            released = self._peer_watch.wait_released(target.key)
        except StoreError as error:
            self._log.warning("watch_failed", error=error.message, watched=target.id)
            self._peer_watch.close()
            return RETRY_S
        if not released:  # interrupted: the ring changed, or the node is stopping
            return 0.0
        with self._lock:
            self._seen_gone.add((target.id, target.key))
        try:
            if nodes.has_stopped(self._database, target.id):
                return 0.0  # it shut down and said so: nothing to take over
            self._log.info("node_gone_seen", watched=target.id)
            store_wakeups.announce(self._database, store_wakeups.Wake.GONE)
        except StoreError as error:
            # Not told: the others' heartbeats read the gone nodes anyway.
            self._log.warning("watch_failed", error=error.message, watched=target.id)
        return 0.0

    def run(self) -> None:
        try:
            super().run()
        finally:
            self._peer_watch.close()

    def close(self) -> None:
        """The node is stopping (its stop event is set): end a wait in progress."""
        self._peer_watch.interrupt()
        self.wake_in(0.0)
