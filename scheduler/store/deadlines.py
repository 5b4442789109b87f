"""A deadline for each database call, kept on this side of the connection.

A connection whose bytes stop passing (a partition, a stalled proxy, a frozen server)
neither fails nor answers: the driver waits in a read for ever, the server's own
timeouts never see a query that never arrived, and TCP keepalives are answered by
whatever sits in between. So a call that outlives its deadline has its socket shut
down from here, by a watch thread: the blocked read returns at once, the driver raises
an ordinary connection error, the pool drops the connection, and the caller retries
as it does after any fault.

Only PostgreSQL connections have a socket to shut; SQLite's waits are bounded by its
busy timeout.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any


class CallWatch:
    """One watch thread for every database of this process."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._calls: dict[int, int] = {}  # call number -> socket file descriptor
        self._numbers = itertools.count()
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def watching(self, dbapi_connection: Any, seconds: float | None) -> Iterator[None]:
        """Cut `dbapi_connection` if the block has not ended `seconds` from now."""
        fd = _socket_of(dbapi_connection)
        if seconds is None or fd is None:
            yield
            return
        number = next(self._numbers)
        with self._lock:
            self._calls[number] = fd
            heapq.heappush(self._heap, (time.monotonic() + seconds, number))
            self._start()
            # The thread sleeps until the earliest deadline of its heap, ended calls'
            # included: it needs waking only for one earlier still. Calls of one handle
            # share a timeout, so nearly none does; waking it for every call cost about
            # 5 % of a short run's CPU (bench.run_path).
            if self._heap[0][1] == number:
                self._lock.notify()
        try:
            yield
        finally:
            with self._lock:
                self._calls.pop(number, None)

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="call-watch", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                while self._heap and self._heap[0][1] not in self._calls:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._lock.wait()
                    continue
                deadline, number = self._heap[0]
                wait = deadline - time.monotonic()
                if wait > 0:
                    self._lock.wait(wait)
                    continue
                heapq.heappop(self._heap)
                fd = self._calls.pop(number)
                # Cut under the lock: the call cannot end (and its connection go back
                # to the pool for someone else) while its socket is being shut.
                _shut(fd)


def _socket_of(dbapi_connection: Any) -> int | None:
    """The file descriptor of a psycopg connection's socket, if it has one."""
    pgconn = getattr(dbapi_connection, "pgconn", None)
    if pgconn is None:
        return None
    try:
        fd = pgconn.socket
    except Exception:  # noqa: BLE001 - a closed or broken connection has no socket to watch
        return None
    return fd if isinstance(fd, int) and fd >= 0 else None


def _shut(fd: int) -> None:
    """Shut the socket down in both directions (on a duplicate of its descriptor, so
    that the driver still owns and closes the original)."""
    with contextlib.suppress(OSError):
        duplicate = socket.socket(fileno=os.dup(fd))
        try:
            duplicate.shutdown(socket.SHUT_RDWR)
        finally:
            duplicate.close()


WATCH = CallWatch()
