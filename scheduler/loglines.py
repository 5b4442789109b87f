"""Where rendered log lines go: the stream, a few at a time when a node is busy.

A busy node says thousands of lines a second (a claim, a start and an outcome each
run), and one write a line is a system call (Docker images set PYTHONUNBUFFERED, so
every write is one) with the GIL handed to another thread during it. A line is written
at once when nothing was written for FLUSH_WINDOW_S, and always when it is a warning or
an error; otherwise it waits, at most that long, and goes out with the lines that
follow it in one write.

Order holds: a library's line (through the handler) and a run's own output (the
dispatcher calls `flush()` before it calls the job) go out after the lines said before
them. What SIGKILL can cost: the info lines of the last FLUSH_WINDOW_S.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from contextlib import suppress
from typing import TextIO

FLUSH_WINDOW_S = 0.05
# More waiting lines than this go out at once, whatever the window (bounded memory).
MOST_WAITING = 256
# A flusher with nothing to do for this long ends; the next waiting line starts one.
FLUSHER_IDLE_S = 60.0


class Handler(logging.StreamHandler[TextIO]):
    """The stream's handler for standard-library records: our waiting lines go first."""

    lines: Lines | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.lines is not None:
            self.lines.flush()  # under this handler's lock, which logging holds: an RLock
        super().emit(record)


class Lines:
    """structlog's final logger: each rendered line written, or left to wait for the
    next write, under the handler's lock (a line of ours and a library's never mix)."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        handler.lines = self
        self._waiting: list[str] = []
        self._written_at = 0.0
        self._wake = threading.Event()
        self._flusher_pid = 0  # the process whose flusher thread runs (none after a fork)
        atexit.register(self._flush_at_exit)

    def msg(self, message: str) -> None:
        self._say(message, urgent=False)

    def urgent(self, message: str) -> None:
        self._say(message, urgent=True)

    log = debug = info = msg
    warn = warning = error = critical = exception = fatal = urgent

    def flush(self, *, blocking: bool = True) -> None:
        """Write every waiting line now (`blocking=False`: unless another thread is
        writing, as from a signal handler on the way out)."""
        if not self._handler.lock or not self._handler.lock.acquire(blocking):
            return
        try:
            if self._waiting:
                self._write([])
        finally:
            self._handler.lock.release()

    def _say(self, message: str, *, urgent: bool) -> None:
        self._handler.acquire()
        try:
            waiting = self._waiting
            if (
                urgent
                or len(waiting) >= MOST_WAITING
                or time.monotonic() - self._written_at >= FLUSH_WINDOW_S
            ):
                self._write([message])
                return
            waiting.append(message)
            if len(waiting) == 1:
                self._start_flusher()
                self._wake.set()
        finally:
            self._handler.release()

    def _write(self, last: list[str]) -> None:
        """Write the waiting lines and `last` in one write (the handler's lock held)."""
        text = "\n".join(self._waiting + last) + "\n"
        self._waiting = []
        self._written_at = time.monotonic()
        self._handler.stream.write(text)
        self._handler.flush()

    def _start_flusher(self) -> None:
        if self._flusher_pid != os.getpid():
            self._flusher_pid = os.getpid()
            flusher = threading.Thread(target=self._flush_later, name="log-flush")
            flusher.daemon = True
            flusher.start()

    def _flush_later(self) -> None:
        while True:
            if self._wake.wait(FLUSHER_IDLE_S):
                self._wake.clear()
                time.sleep(max(0.0, self._written_at + FLUSH_WINDOW_S - time.monotonic()))
                self.flush()
                continue
            self._handler.acquire()
            try:
                if not self._waiting:  # idle: leave; the next waiting line starts another
                    self._flusher_pid = 0
                    return
            finally:
                self._handler.release()

    def _flush_at_exit(self) -> None:
        with suppress(ValueError, OSError):  # a stream already closed, or gone
            self.flush()


_current: Lines | None = None


def install(handler: Handler) -> Lines:
    """The process's lines, written through `handler` from now on."""
    global _current  # noqa: PLW0603 - the process has one stdout
    if _current is not None:
        _current.flush()
    _current = Lines(handler)
    return _current


def flush(*, blocking: bool = True) -> None:
    """Write every waiting line now: before a job's own output, or leaving with os._exit."""
    if _current is not None:
        _current.flush(blocking=blocking)
