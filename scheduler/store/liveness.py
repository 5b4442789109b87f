"""The liveness session: a connection of the node's own that holds its liveness lock
(a session advisory lock, `pg_advisory_lock(int4, int4)` with LIVENESS_NAMESPACE) for
as long as the node lives. See `scheduler.node.liveness` for what it is for.

Its faults are the store's own (`StoreUnavailableError`), like every other call's.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from scheduler.store.database import (
    CONNECT_TIMEOUT_S,
    KEEPALIVE_COUNT,
    KEEPALIVE_IDLE_S,
    KEEPALIVE_INTERVAL_S,
    TCP_USER_TIMEOUT_MS,
    Database,
)
from scheduler.store.faults import StoreUnavailableError, first_line
from scheduler.store.nodes import LIVENESS_NAMESPACE

DEFAULT_PORT = 5432


def ports(database: Database) -> tuple[int, int]:
    """The port the URL names, and the one the server itself listens on: where they
    differ, something (a pooler, a proxy) sits in between."""
    with database.transaction() as connection:
        server = int(connection.exec_driver_sql("SELECT current_setting('port')").scalar_one())
    return database.engine.url.port or DEFAULT_PORT, server


@contextmanager
def _faults() -> Iterator[None]:
    try:
        yield
    except (psycopg.Error, OSError) as error:
        raise StoreUnavailableError(first_line(error)) from error


class SessionLock:
    """The liveness lock and its connection; `connect()` takes a fresh key each time."""

    def __init__(self, database: Database, application_name: str) -> None:
        url = database.engine.url.set(drivername="postgresql")
        self._conninfo = url.render_as_string(hide_password=False)
        self._application_name = application_name
        self._connection: psycopg.Connection[Any] | None = None
        self.key: int | None = None

    def connect(self) -> int:
        """Open the connection and take the lock under a key nobody holds; its key."""
        with _faults():
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
                    self._connection, self.key = connection, key
                    return key

    def fileno(self) -> int:
        """The session's socket: readable at once when the server ends the session."""
        assert self._connection is not None
        with _faults():
            return self._connection.fileno()

    def still_mine(self) -> bool:
        """Whether the lock is granted to this very session (and the session answers)."""
        assert self._connection is not None
        with _faults():
            row = self._connection.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                " AND objsubid = 2 AND classid = CAST(%s AS oid) AND objid = CAST(%s AS oid)"
                " AND pid = pg_backend_pid()",
                (LIVENESS_NAMESPACE, self.key),
            ).fetchone()
        return row is not None and row[0] == 1

    def close(self) -> None:
        if self._connection is not None:
            with contextlib.suppress(psycopg.Error):
                self._connection.close()
        self._connection, self.key = None, None
