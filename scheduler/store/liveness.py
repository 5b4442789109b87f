"""The liveness session: a connection of the node's own that holds its liveness lock
(a session advisory lock, `pg_advisory_lock(int4, int4)` with LIVENESS_NAMESPACE) for
as long as the node lives, and LISTENs for the other nodes' wake-ups
(`store.wakeups`). See `scheduler.node.liveness` for what it is for.

`PeerWatch` is the other half: a second connection that waits, without polling, for
another node's lock to be released (a shared request on the same key is granted only
once the holder's session has ended), so that a node's death is known at once.

Its faults are the store's own (`StoreUnavailableError`), like every other call's.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from scheduler.store.database import CONNECT_TIMEOUT_S, Database, postgres_settings
from scheduler.store.faults import ServerDownError, StoreUnavailableError, first_line
from scheduler.store.nodes import LIVENESS_NAMESPACE
from scheduler.store.wakeups import CHANNEL

# How long a liveness or watch session's wait sleeps at a time (it ends sooner when the
# server answers, the session ends, or the caller's own timeout passes).
IDLE_WAIT_S = 60.0
# The server may end the liveness session for a silent network no sooner than this
# (its TCP keepalives and user timeout, raised on that session where they are set
# lower): the node's own keepalives find a silent network first (about 11 s, see
# `store.database`), so a holder learns it may have lost its lock before the server
# lets the lock go for it.
SERVER_SILENCE_FLOOR = {
    "tcp_keepalives_idle": 30,
    "tcp_keepalives_interval": 10,
    "tcp_keepalives_count": 3,
    "tcp_user_timeout": 60_000,
}
# A session ended by the server says why first (a FATAL, or for an immediate shutdown a
# WARNING, of class 57, "operator intervention": a shutdown, a crash, a terminated
# backend, an idle-session timeout); one that merely breaks says nothing.
SERVER_ENDED_CLASS = "57"
# A server that is up but turns this session away says so (a FATAL: too many clients,
# authentication, a database that does not exist): the other nodes may well be
# connected. Any other failure to connect (refused, closed before the server spoke, a
# timeout, "the database system is starting up / shutting down / in recovery") is a
# server that does not serve.
TURNED_AWAY = "FATAL:"
NOT_SERVING = "the database system is"


def ports(database: Database) -> tuple[int, int]:
    """The port the URL names, and the one the server itself listens on: where they
    differ, something (a pooler, a proxy) sits in between."""
    with database.autocommit() as connection:
        server = int(connection.execute("SELECT current_setting('port')").scalar())
    return database.url.port, server


@contextmanager
def _faults() -> Iterator[None]:
    try:
        yield
    except (psycopg.Error, OSError) as error:
        raise StoreUnavailableError(first_line(error)) from error


class SessionLock:
    """The liveness lock and its connection; `connect()` takes a fresh key each time.

    `ended_by_server`: the server said, as the session ended, that it was ending it (a
    restart, a terminated backend), rather than the connection merely breaking.
    """

    def __init__(self, database: Database, application_name: str) -> None:
        self._conninfo = database.url.conninfo
        self._application_name = application_name
        self._connection: psycopg.Connection[Any] | None = None
        self.key: int | None = None
        self.ended_by_server = False

    def connect(self) -> int:
        """Open the connection, take the lock under a key nobody holds, and listen for
        wake-ups; its key. `ServerDownError` when no server serves the connection (as
        opposed to one that answers and turns it away)."""
        self.ended_by_server = False
        try:
            connection = _session(self._conninfo, f"{self._application_name} liveness")
        except psycopg.Error as error:
            message = first_line(error)
            text = str(error)
            if TURNED_AWAY in text and NOT_SERVING not in text:
                raise StoreUnavailableError(message) from error
            raise ServerDownError(message) from error
        with _faults():
            connection.add_notice_handler(self._heard)
            _raise_silence_floor(connection)
            connection.execute(f"LISTEN {CHANNEL}")
            while True:
                key = secrets.randbelow(2**31 - 1) + 1
                row = connection.execute(
                    "SELECT pg_try_advisory_lock(%s, %s)", (LIVENESS_NAMESPACE, key)
                ).fetchone()
                if row is not None and row[0]:
                    self._connection, self.key = connection, key
                    return key

    def _heard(self, notice: psycopg.errors.Diagnostic) -> None:
        """A notice on the session; the server's last word before it ends one is here."""
        if (notice.sqlstate or "").startswith(SERVER_ENDED_CLASS):
            self.ended_by_server = True

    def fileno(self) -> int:
        """The session's socket: readable at once when the server ends the session."""
        assert self._connection is not None
        with _faults():
            return self._connection.fileno()

    def notifications(self, timeout: float) -> Iterator[str]:
        """The payloads of wake-ups as they arrive, for up to `timeout` seconds; a fault
        (the session ended) raises `StoreUnavailableError`."""
        assert self._connection is not None
        with _faults():
            for notice in self._connection.notifies(timeout=timeout):
                yield notice.payload

    def still_mine(self) -> bool:
        """Whether the lock is granted to this very session (and the session answers)."""
        assert self._connection is not None
        with _faults():
            row = self._connection.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                " AND objsubid = 2 AND classid = CAST(%s AS oid) AND objid = CAST(%s AS oid)"
                " AND mode = 'ExclusiveLock' AND pid = pg_backend_pid()",
                (LIVENESS_NAMESPACE, self.key),
            ).fetchone()
        return row is not None and row[0] == 1

    def close(self) -> None:
        if self._connection is not None:
            with contextlib.suppress(psycopg.Error):
                self._connection.close()
        self._connection, self.key = None, None


class PeerWatch:
    """A connection of its own that waits for another node's liveness lock to go.

    `wait_released(key)` blocks in `pg_advisory_lock_shared` until the holder's session
    has ended, then lets the shared lock go at once (a shared holder is not the node's
    liveness, see `store.nodes`). `interrupt()`, from another thread, ends a wait early
    (the ring changed); the wait then returns False.
    """

    def __init__(self, database: Database, application_name: str) -> None:
        self._conninfo = database.url.conninfo
        self._application_name = application_name
        self._connection: psycopg.Connection[Any] | None = None

    def wait_released(self, key: int) -> bool:
        """Wait until `key`'s lock is released; False if interrupted first."""
        with _faults():
            if self._connection is None or self._connection.closed:
                self._connection = _session(self._conninfo, f"{self._application_name} watch")
            connection = self._connection
            try:
                connection.execute(
                    "SELECT pg_advisory_lock_shared(%s, %s)", (LIVENESS_NAMESPACE, key)
                )
            except psycopg.errors.QueryCanceled:
                return False
            # An interrupt that came just too late may cancel this instead: say it again.
            for _ in range(2):
                with contextlib.suppress(psycopg.errors.QueryCanceled):
                    connection.execute(
                        "SELECT pg_advisory_unlock_shared(%s, %s)", (LIVENESS_NAMESPACE, key)
                    )
                    break
        return True

    def interrupt(self) -> None:
        connection = self._connection
        if connection is not None and not connection.closed:
            with contextlib.suppress(psycopg.Error):
                connection.cancel_safe(timeout=CONNECT_TIMEOUT_S)

    def close(self) -> None:
        if self._connection is not None:
            with contextlib.suppress(psycopg.Error):
                self._connection.close()
        self._connection = None


class _Patient(psycopg.Connection[Any]):
    """A session that sleeps in its waits: psycopg wakes every 0.1 s while it waits on the
    server (to let a signal in), ten wake-ups a second for sessions that wait all day
    (LISTEN, a lock held by the next node). Signals go to the main thread, never here."""

    def wait(self, gen: Any, interval: float | None = None, timeout: float | None = None) -> Any:
        return super().wait(gen, interval=IDLE_WAIT_S, timeout=timeout)


def _raise_silence_floor(connection: psycopg.Connection[Any]) -> None:
    """Raise, for this session only, any server TCP timeout set below its floor (0 is the
    kernel's own, hours: left as it is)."""
    for setting, floor in SERVER_SILENCE_FLOOR.items():
        with contextlib.suppress(psycopg.Error):
            # pg_settings gives the value in its base unit (s, or ms for the user timeout).
            row = connection.execute(
                "SELECT setting FROM pg_settings WHERE name = %s", (setting,)
            ).fetchone()
            current = int(row[0]) if row and str(row[0]).isdigit() else 0
            if 0 < current < floor:
                connection.execute("SELECT set_config(%s, %s, false)", (setting, str(floor)))


def _session(conninfo: str, application_name: str) -> psycopg.Connection[Any]:
    """A direct connection that idles for days by design, with keepalives that find a
    vanished server."""
    connection = _Patient.connect(conninfo, autocommit=True, **postgres_settings(application_name))
    # No server timeout may end it, nor the watch's wait for a lock (a database or role
    # may set any of them; before PostgreSQL 14 there is no idle_session_timeout).
    for setting in ("lock_timeout", "statement_timeout", "idle_session_timeout"):
        with contextlib.suppress(psycopg.Error):
            connection.execute("SELECT set_config(%s, '0', false)", (setting,))
    return connection
