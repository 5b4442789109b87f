"""The daemon loop's sleep, cut short by the node's stop or by a signal, whichever
thread the kernel gave the signal to.

Python runs a signal's handler in the main thread, the next time that thread runs
bytecode. A process-directed signal (a rolling deploy's SIGTERM, a `kill`) may land on
any thread that does not block it, and then nothing wakes the main thread: asleep on an
Event until its next period, a node of daily jobs heard its SIGTERM at midnight. The C
handler writes the signal's number to Python's wake-up fd (`signal.set_wakeup_fd`) on
whatever thread it runs; the loop sleeps on that socket, so the main thread wakes, and
the handler runs there at once.
"""

from __future__ import annotations

import contextlib
import select
import signal
import socket
import threading
from types import TracebackType

from scheduler.supervision import StopSignal


class MainSleep:
    """`sleep(seconds)` until the time is up, the stop is set, or a signal arrived."""

    def __init__(self, stop: StopSignal) -> None:
        self._stop = stop
        self._read, self._write = socket.socketpair()
        self._read.setblocking(False)
        self._write.setblocking(False)
        self._previous: int | None = None
        if threading.current_thread() is threading.main_thread():
            # Elsewhere (a node run by a test in a thread) signals are not the node's.
            self._previous = signal.set_wakeup_fd(self._write.fileno(), warn_on_full_buffer=False)
        stop.on_set(self._nudge)

    def sleep(self, seconds: float | None) -> None:
        if self._stop.is_set():
            return
        readable, _, _ = select.select([self._read], [], [], seconds)
        if readable:
            self._drain()

    def close(self) -> None:
        if self._previous is not None:
            signal.set_wakeup_fd(self._previous)
            self._previous = None
        self._write.close()
        self._read.close()

    def __enter__(self) -> MainSleep:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def _nudge(self) -> None:
        # Full: a wake-up is pending anyway. Closed: the node is done.
        with contextlib.suppress(OSError):
            self._write.send(b"\0")

    def _drain(self) -> None:
        with contextlib.suppress(BlockingIOError):  # nothing more to read
            while self._read.recv(4096):
                pass
