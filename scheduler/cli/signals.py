"""SIGTERM and SIGINT, acted on whichever thread the kernel gave them to.

Python runs a signal's handler in the main thread, the next time that thread runs
bytecode. The kernel hands a process's signal (a rolling deploy's SIGTERM, a `kill`,
Ctrl-C) to any of its threads that does not block it, and nothing then wakes the main
thread: asleep until a node's next period, a node of daily jobs heard its SIGTERM at
midnight, and the console, whose main thread only waits, never. Here the Python handler
does nothing; the C handler also writes the signal's number to Python's wake-up fd
(`signal.set_wakeup_fd`) on whatever thread it runs, and a thread of ours reads it and
acts: the first signal stops the command, a second leaves at once.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Callable
from types import FrameType

from scheduler import logs

HANDLED = (signal.SIGTERM, signal.SIGINT)
# The wake-up fd's writing end lives as long as the process: closed, its number could be
# reused by a file the C handler would then write into.
_ends: list[socket.socket] = []


def install_signal_handlers(request_stop: Callable[[], None]) -> None:
    """First SIGTERM/SIGINT: `request_stop()` (stop and drain). A second: exit at once,
    with 128 + the signal's number. Call from the main thread, once per process."""
    reader, writer = socket.socketpair()
    writer.setblocking(False)  # the C handler must never block
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    for signum in HANDLED:
        signal.signal(signum, _acted_on_elsewhere)
    _ends.append(writer)
    threading.Thread(target=_act, args=(reader, request_stop), name="signals", daemon=True).start()


def _acted_on_elsewhere(_signum: int, _frame: FrameType | None) -> None:
    """A Python handler must be installed for the C one to write the wake-up fd; the
    signals thread acts on what it writes."""


def _act(reader: socket.socket, request_stop: Callable[[], None]) -> None:
    received: list[int] = []
    while data := reader.recv(64):
        for signum in data:
            if signum not in HANDLED:
                continue
            if received:
                os._exit(128 + signum)
            received.append(signum)
            logs.get_logger().info("signal_received", signal=signal.Signals(signum).name)
            request_stop()
