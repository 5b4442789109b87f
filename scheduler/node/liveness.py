"""A node's liveness bound to a connection of its own (PostgreSQL, direct connections).

The node holds a session advisory lock on a dedicated connection for as long as it
lives. When its process dies (SIGKILL, the OOM killer) the server ends that session and
the lock leaves `pg_locks`: the other nodes see it on their next recovery pass and end
the dead node's leases, so its runs are taken over in about a second instead of a lease.

The holder's side of the bargain: it must know that it lost the lock before the others
act on it. A thread here waits on the connection's socket; a closed session makes it
readable at once, and a check every few seconds asks the server whether the lock is
still this session's (a pooler that hid another session behind ours fails it). On a
loss every run the node holds is given up at once (they may be retaken in a second),
the node's row stops naming the lock (its leases alone decide meanwhile), and a new
lock is taken on a new connection.

Behind a transaction pooler a session lock means nothing: the lease alone decides. The
mode is chosen at start (`--liveness auto|session|lease`) and logged (`liveness_mode`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING

from structlog.typing import FilteringBoundLogger

from scheduler.errors import UserError
from scheduler.node.wakeups import Wakeups
from scheduler.store import nodes
from scheduler.store.database import Database
from scheduler.store.faults import StoreError
from scheduler.supervision import SideThread, StopSignal

if TYPE_CHECKING:
    from scheduler.store.liveness import SessionLock

# A session that ends is noticed at once (the wait for notifications fails); the lock
# itself is checked by every heartbeat, which raises a doubt here when it is not held,
# looked into within this long.
SELF_CHECK_S = 5.0
RECONNECT_S = 1.0


class Mode(StrEnum):
    AUTO = "auto"
    SESSION = "session"
    LEASE = "lease"


def parse_mode(raw: str) -> Mode:
    try:
        return Mode(raw)
    except ValueError:
        allowed = ", ".join(mode.value for mode in Mode)
        raise UserError(f"--liveness: must be one of {allowed}, got {raw!r}") from None


def choose(database: Database, wanted: Mode) -> tuple[Mode, str]:
    """The mode this node runs in, and why (for the log)."""
    if not database.sessions:
        return Mode.LEASE, "SQLite: one host, the lease decides"
    if wanted is Mode.LEASE:
        return Mode.LEASE, "--liveness lease"
    if wanted is Mode.SESSION:
        return Mode.SESSION, "--liveness session"
    # Only here, on PostgreSQL: the sessions are psycopg's, which SQLite nodes never load.
    from scheduler.store.liveness import ports  # noqa: PLC0415

    port, server_port = ports(database)
    if server_port != port:
        return Mode.LEASE, (
            f"the server listens on {server_port}, the URL names {port}: a pooler or proxy "
            "may hide sessions (--liveness session to override)"
        )
    return Mode.SESSION, "a direct connection"


class Liveness(SideThread):
    """Holds the node's liveness lock and watches it (see the module docstring).

    `lost()` runs the moment the lock may be gone; the node's row is then told, and a
    new lock taken, until `close()`.
    """

    def __init__(
        self,
        *,
        database: Database,
        node_id: str,
        lock: SessionLock,
        lost: Callable[[], None],
        log: FilteringBoundLogger,
        halt: threading.Event,
        wakeups: Wakeups | None = None,
    ) -> None:
        self._closing = StopSignal()
        super().__init__("liveness", self._closing, log, halt=halt)
        self._database = database
        self._node_id = node_id
        self._lock = lock
        self._lost = lost
        self._wakeups = wakeups
        self._doubt = threading.Event()

    def step(self) -> float:
        error = self._watch()
        if self._closing.is_set():
            return 0.0
        self._log.warning("liveness_lost", error=error)
        if self._wakeups is not None:
            self._wakeups.set_listening(False)
        self._lost()
        self._lock.close()
        self._forget_key()
        self._take_again()
        return 0.0

    def _watch(self) -> str:
        """Hand on wake-ups until the lock may be lost; why."""
        while not self._closing.is_set():
            try:
                for payload in self._lock.notifications(SELF_CHECK_S):
                    if self._wakeups is not None:
                        self._wakeups.heard(payload)
                    if self._closing.is_set():
                        return "closing"
                if self._doubt.is_set():
                    self._doubt.clear()
                    if not self._lock.still_mine():
                        return "the lock is no longer this session's"
            except StoreError as error:
                return error.message
        return "closing"

    def doubt(self) -> None:
        """A heartbeat found this node's lock not held: check on it."""
        self._doubt.set()

    def _forget_key(self) -> None:
        """Until a new lock is held, the node's row names none: only the lease counts."""
        while not self._closing.is_set():
            try:
                nodes.set_liveness(self._database, self._node_id, None)
            except StoreError as error:
                self._log.warning("heartbeat_failed", error=error.message)
                self._closing.wait(RECONNECT_S)
            else:
                return

    def _take_again(self) -> None:
        while not self._closing.is_set():
            try:
                key = self._lock.connect()
                nodes.set_liveness(self._database, self._node_id, key)
            except StoreError as error:
                self._lock.close()
                self._log.warning("liveness_unavailable", error=error.message)
                self._closing.wait(RECONNECT_S)
            else:
                self._log.info("liveness_restored", key=key)
                if self._wakeups is not None:
                    self._wakeups.set_listening(True)
                return

    def close(self) -> None:
        """The node has stopped: let the lock go with the connection."""
        self._closing.set()
        self._lock.close()
