"""A node's liveness bound to a connection of its own (PostgreSQL, direct connections).

The node holds a session advisory lock on a dedicated connection for as long as it
lives. When its process dies (SIGKILL, the OOM killer) the server ends that session and
the lock leaves `pg_locks`: the other nodes see it at once and, once sure it is a death,
end the dead node's leases, so its runs are taken over in about a second instead of a
lease (`scheduler.node.recovery`).

A session also ends while its node lives: a database restart or failover, a DBA's
`pg_terminate_backend`, a proxy. So losing the session is not losing the runs: the
holder takes a new lock at once and keeps every run whose lease is valid (the lease
watch still gives each up by its own clock). The peers take a vanished lock for a
death only when it went while they stayed connected and did not come back within
`recovery.CONFIRM_S`; a holder that cannot take a new lock within RESTORE_WITHIN_S
(less than that) may be cut off alone, where its peers would judge so, and gives every
run up first. Unless the server itself said it ended the session and has accepted no
connection since: a restart or a shutdown, which no peer stays connected through, so
no peer can judge anything before the leases end.

A thread waits on the connection's socket; a closed session makes it readable at
once, and a check every few seconds asks the server whether the lock is still this
session's (a pooler that hid another session behind ours fails it). Behind a
transaction pooler a session lock means nothing: the lease alone decides. The mode is
chosen at start (`--liveness auto|session|lease`) and logged (`liveness_mode`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING

from structlog.typing import FilteringBoundLogger

from scheduler.errors import UserError
from scheduler.node.wakeups import Wakeups
from scheduler.store import nodes
from scheduler.store.database import Database
from scheduler.store.faults import ServerDownError, StoreError
from scheduler.supervision import SideThread, StopSignal

if TYPE_CHECKING:
    from scheduler.store.liveness import SessionLock

# A session that ends is noticed at once (the wait for notifications fails); the lock
# itself is checked by every heartbeat, which raises a doubt here when it is not held,
# looked into within this long.
SELF_CHECK_S = 5.0
# A holder that has not taken a new lock this long after losing its session gives its
# runs up (unless the server is down for every node): its peers act no sooner than
# `recovery.CONFIRM_S` after the lock went, which leaves a body a second to stop.
RESTORE_WITHIN_S = 0.5
# Tries to take a new lock: at once, then after a pause doubling up to a second.
RECONNECT_FIRST_S = 0.05
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


class _Restoring:
    """What a holder learnt while it tried to take a new lock, and what it decided."""

    def __init__(self, by_server: bool) -> None:
        self.by_server = by_server
        self.server_down = False
        self.other_failure = False
        self.restored = False
        self.gave_up = False
        self.lock = threading.Lock()

    @property
    def everyone_down(self) -> bool:
        """The server ended the session and no server has served a connection since (not
        one turned away by a server that answers): a restart or a shutdown, which no
        peer stays connected through, so none can take this node for dead."""
        return self.by_server and self.server_down and not self.other_failure


class Liveness(SideThread):
    """Holds the node's liveness lock and watches it (see the module docstring).

    `key` is the lock held now (None while a new one is being taken). `give_up()` runs
    when the runs must be given up because the peers may take the node for dead.
    """

    def __init__(
        self,
        *,
        database: Database,
        node_id: str,
        lock: SessionLock,
        give_up: Callable[[], None],
        log: FilteringBoundLogger,
        halt: threading.Event,
        wakeups: Wakeups | None = None,
    ) -> None:
        self._closing = StopSignal()
        super().__init__("liveness", self._closing, log, halt=halt)
        self._database = database
        self._node_id = node_id
        self._lock = lock
        self._give_up = give_up
        self._wakeups = wakeups
        self._doubt = threading.Event()
        self.key: int | None = lock.key

    def step(self) -> float:
        error = self._watch()
        if self._closing.is_set():
            return 0.0
        by_server = self._lock.ended_by_server
        self.key = None
        self._log.warning("liveness_lost", error=error, ended_by_server=by_server)
        if self._wakeups is not None:
            self._wakeups.set_listening(False)
        self._lock.close()
        self._restore(_Restoring(by_server))
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

    def _restore(self, restoring: _Restoring) -> None:
        """Take a new lock, at once and again until it is held; meanwhile judge, at
        RESTORE_WITHIN_S, whether the runs must be given up."""
        began = time.monotonic()
        judge = threading.Timer(RESTORE_WITHIN_S, self._judge, args=(restoring,))
        judge.daemon = True
        judge.start()
        pause = RECONNECT_FIRST_S
        while not self._closing.is_set():
            try:
                key = self._lock.connect()
                nodes.set_liveness(self._database, self._node_id, key)
            except ServerDownError as error:
                with restoring.lock:
                    restoring.server_down = True
                self._lock.close()
                self._log.warning("liveness_unavailable", error=error.message, server_down=True)
            except StoreError as error:
                with restoring.lock:
                    restoring.other_failure = True
                self._lock.close()
                self._log.warning("liveness_unavailable", error=error.message)
            else:
                with restoring.lock:
                    restoring.restored = True
                    gave_up = restoring.gave_up
                judge.cancel()
                self.key = key
                self._log.info(
                    "liveness_restored",
                    key=key,
                    after_s=round(time.monotonic() - began, 3),
                    runs_kept=not gave_up,
                )
                if self._wakeups is not None:
                    self._wakeups.set_listening(True)
                return
            self._closing.wait(pause)
            pause = min(pause * 2, RECONNECT_S)
        judge.cancel()

    def _judge(self, restoring: _Restoring) -> None:
        """RESTORE_WITHIN_S after the loss, without a new lock: give every run up, unless
        no peer can be judging this node (the server is down for everyone)."""
        with restoring.lock:
            if restoring.restored or self._closing.is_set():
                return
            keep = restoring.everyone_down
            restoring.gave_up = not keep
        if keep:
            self._log.warning(
                "liveness_kept", why="the server ended every session and accepts none"
            )
            return
        self._log.warning(
            "liveness_gave_up", why="no new lock within the time a peer may judge this node"
        )
        self._give_up()

    def close(self) -> None:
        """The node has stopped: let the lock go with the connection."""
        self._closing.set()
        self._lock.close()
