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

import contextlib
import secrets
import select
import threading
from collections.abc import Callable
from enum import StrEnum
from typing import Any

import psycopg
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError
from structlog.typing import FilteringBoundLogger

from scheduler.errors import UserError
from scheduler.store import nodes
from scheduler.store.database import (
    CONNECT_TIMEOUT_S,
    KEEPALIVE_COUNT,
    KEEPALIVE_IDLE_S,
    KEEPALIVE_INTERVAL_S,
    TCP_USER_TIMEOUT_MS,
    Database,
    describe_fault,
)
from scheduler.store.nodes import LIVENESS_NAMESPACE

# How often the holder asks whether its lock is still its own session's (a session that
# ends makes the socket readable at once; this is for a pooler hiding sessions, rare).
SELF_CHECK_S = 30.0
RECONNECT_S = 1.0
DEFAULT_PORT = 5432


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


class SessionLock:
    """The liveness lock and its connection; `connect()` takes a fresh key each time."""

    def __init__(self, url: URL, application_name: str) -> None:
        self._conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._application_name = application_name
        self.connection: psycopg.Connection[Any] | None = None
        self.key: int | None = None

    def connect(self) -> int:
        """Open the connection and take the lock under a key nobody holds; its key."""
        connection = psycopg.connect(
            self._conninfo,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_S,
            application_name=f"{self._application_name} liveness"[:63],
            keepalives=1,
            keepalives_idle=KEEPALIVE_IDLE_S,
            keepalives_interval=KEEPALIVE_INTERVAL_S,
            keepalives_count=KEEPALIVE_COUNT,
            tcp_user_timeout=TCP_USER_TIMEOUT_MS,
            prepare_threshold=None,
        )
        # This session idles for days by design: no server timeout may end it (before
        # PostgreSQL 14 there is no such timeout to turn off).
        with contextlib.suppress(psycopg.Error):
            connection.execute("SELECT set_config('idle_session_timeout', '0', false)")
        while True:
            key = secrets.randbelow(2**31 - 1) + 1
            row = connection.execute(
                "SELECT pg_try_advisory_lock(%s, %s)", (LIVENESS_NAMESPACE, key)
            ).fetchone()
            if row is not None and row[0]:
                self.connection, self.key = connection, key
                return key

    def still_mine(self) -> bool:
        """Whether the lock is granted to this very session (and the session answers)."""
        assert self.connection is not None
        row = self.connection.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND objsubid = 2 AND classid = CAST(%s AS oid) AND objid = CAST(%s AS oid)"
            " AND pid = pg_backend_pid()",
            (LIVENESS_NAMESPACE, self.key),
        ).fetchone()
        return row is not None and row[0] == 1

    def close(self) -> None:
        if self.connection is not None:
            with contextlib.suppress(psycopg.Error):
                self.connection.close()
        self.connection, self.key = None, None


def choose(database: Database, wanted: Mode) -> tuple[Mode, str]:
    """The mode this node runs in, and why (for the log)."""
    if not database.is_postgres:
        return Mode.LEASE, "SQLite: one host, the lease decides"
    if wanted is Mode.LEASE:
        return Mode.LEASE, "--liveness lease"
    if wanted is Mode.SESSION:
        return Mode.SESSION, "--liveness session"
    port = database.engine.url.port or DEFAULT_PORT
    with database.transaction() as connection:
        server_port = int(connection.exec_driver_sql("SELECT current_setting('port')").scalar_one())
    if server_port != port:
        return Mode.LEASE, (
            f"the server listens on {server_port}, the URL names {port}: a pooler or proxy "
            "may hide sessions (--liveness session to override)"
        )
    return Mode.SESSION, "a direct connection"


class Liveness(threading.Thread):
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
    ) -> None:
        super().__init__(name="liveness", daemon=True)
        self._database = database
        self._node_id = node_id
        self._lock = lock
        self._lost = lost
        self._log = log
        self._closing = threading.Event()

    def run(self) -> None:
        while not self._closing.is_set():
            error = self._watch()
            if self._closing.is_set():
                return
            self._log.warning("liveness_lost", error=error)
            self._lost()
            self._lock.close()
            self._forget_key()
            self._take_again()

    def _watch(self) -> str:
        """Block until the lock may be lost; why."""
        while not self._closing.is_set():
            connection = self._lock.connection
            assert connection is not None
            try:
                readable, _, _ = select.select([connection.fileno()], [], [], SELF_CHECK_S)
                if self._closing.is_set():
                    return "closing"
                # Readable: the session ended (or the server spoke); ask, and find out.
                if not self._lock.still_mine():
                    return "the lock is no longer this session's"
                del readable
            except (psycopg.Error, OSError, ValueError) as error:
                return str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        return "closing"

    def _forget_key(self) -> None:
        """Until a new lock is held, the node's row names none: only the lease counts."""
        while not self._closing.is_set():
            try:
                nodes.set_liveness(self._database, self._node_id, None)
            except SQLAlchemyError as error:
                self._log.warning("heartbeat_failed", error=describe_fault(error))
                self._closing.wait(RECONNECT_S)
            else:
                return

    def _take_again(self) -> None:
        while not self._closing.is_set():
            try:
                key = self._lock.connect()
                nodes.set_liveness(self._database, self._node_id, key)
            except (psycopg.Error, OSError, SQLAlchemyError) as error:
                self._lock.close()
                self._log.warning("liveness_unavailable", error=describe_fault(error))
                self._closing.wait(RECONNECT_S)
            else:
                self._log.info("liveness_restored", key=key)
                return

    def close(self) -> None:
        """The node has stopped: let the lock go with the connection."""
        self._closing.set()
        self._lock.close()
