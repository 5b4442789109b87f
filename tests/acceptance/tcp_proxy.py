"""A TCP proxy on loopback that a test can break in the ways networks break, without
touching the shared database server:

- `cut()`: close every connection and refuse new ones (the database went away);
- `freeze()` / `thaw()`: stop passing bytes in either direction while every connection
  stays open, then pass what was held (a partition: nothing is refused, nothing arrives);
- `lose_reply_to(marker)`: the next statement whose text contains `marker` reaches the
  server and is committed there, but the reply that would say so is dropped and the
  connection closed (a lost acknowledgement): the first ReadyForQuery after the statement
  that finds the session idle, so for a statement inside a transaction, the COMMIT's;
- `freeze_after(marker)`: the next request whose text contains `marker` reaches the
  server, and then every byte is held, as by `freeze()` (a partition that falls in the
  middle of a transaction: the server holds its locks, the client never hears back);
- `hold_reply_to(marker)`: as `lose_reply_to`, but instead of closing the connection,
  every byte from that reply on is held, as by `freeze()` (a partition right after a
  commit: the write landed, its writer never hears so, and the server keeps the
  writer's sessions).

Reading replies needs the PostgreSQL wire protocol's framing (a type byte and a length)
and nothing more, so connections must not use TLS or GSS encryption: point the node at
`proxy.url(...)`, which adds `sslmode=disable&gssencmode=disable`.
"""

from __future__ import annotations

import socket
import struct
import threading
from contextlib import suppress
from dataclasses import dataclass

READY_FOR_QUERY = b"Z"
IDLE = b"I"  # ReadyForQuery's transaction status: no transaction open, all is committed


@dataclass
class _Trap:
    """A lost acknowledgement waiting to happen."""

    marker: bytes
    sprung: threading.Event
    holds: bool = False  # hold the reply (a partition) instead of closing (a drop)


class _Pair:
    """One client connection and its upstream twin, pumped by two threads."""

    def __init__(self, proxy: Proxy, client: socket.socket, upstream: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        # A trap this connection has walked into: the next reply (ReadyForQuery, idle)
        # is dropped and the connection closed.
        self.armed: _Trap | None = None

    def close(self) -> None:
        for sock in (self.client, self.upstream):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def pump_requests(self) -> None:
        with suppress(OSError):
            while data := self.client.recv(65536):
                self.proxy.flowing.wait()
                self._watch_request(data)
                self.upstream.sendall(data)
                self.proxy.freeze_if_marked(data)
        # A partition holds the end of a connection too: the far side must not learn of it.
        self.proxy.flowing.wait()
        with suppress(OSError):
            self.upstream.shutdown(socket.SHUT_WR)

    def _watch_request(self, data: bytes) -> None:
        proxy = self.proxy
        with proxy.lock:
            if self.armed is None and proxy.trap is not None and proxy.trap.marker in data:
                self.armed, proxy.trap = proxy.trap, None

    def pump_replies(self) -> None:
        buffer = b""
        with suppress(OSError):
            while data := self.upstream.recv(65536):
                self.proxy.flowing.wait()
                if not self.proxy.framed:
                    self.client.sendall(data)
                    continue
                buffer += data
                forward, buffer, spring = self._frame(buffer)
                if spring is not None and not spring.holds:
                    self.close()
                    return
                self.client.sendall(forward)
                if spring is not None:  # the reply and all after it wait for a thaw
                    self.proxy.flowing.clear()
                    spring.sprung.set()
                    self.proxy.flowing.wait()
                    forward, buffer, _ = self._frame(buffer)
                    self.client.sendall(forward)
        self.proxy.flowing.wait()
        with suppress(OSError):
            self.client.shutdown(socket.SHUT_WR)

    def _frame(self, buffer: bytes) -> tuple[bytes, bytes, _Trap | None]:
        """Split complete server messages off `buffer`: (bytes to forward, the rest, and
        the armed trap if it springs on a ReadyForQuery among them: a trap that holds
        leaves that message at the head of the rest)."""
        forward = bytearray()
        while len(buffer) >= 5:
            (length,) = struct.unpack("!I", buffer[1:5])
            if len(buffer) < 1 + length:
                break
            message, rest = buffer[: 1 + length], buffer[1 + length :]
            with self.proxy.lock:
                trap = self.armed
            if trap is not None and message[:1] == READY_FOR_QUERY and message[5:6] == IDLE:
                with self.proxy.lock:
                    self.armed = None
                if trap.holds:
                    return bytes(forward), buffer, trap
                trap.sprung.set()
                return bytes(forward), b"", trap
            forward += message
            buffer = rest
        return bytes(forward), buffer, None


class Proxy:
    """`framed=True` reads the server's replies message by message (needed for
    `lose_reply_to`; connections must then come through `url()`, unencrypted)."""

    def __init__(
        self, target_port: int, target_host: str = "127.0.0.1", *, framed: bool = False
    ) -> None:
        self._target = (target_host, target_port)
        self.framed = framed
        self.lock = threading.Lock()
        self._pairs: list[_Pair] = []
        self._listener: socket.socket | None = None
        self.trap: _Trap | None = None
        self.freeze_trap: _Trap | None = None
        self.flowing = threading.Event()
        self.flowing.set()
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port: int = probe.getsockname()[1]
        probe.close()

    def url(self, database_url: str) -> str:
        """`database_url` (on the target server) as seen through this proxy."""
        base, _, name = database_url.rpartition("/")
        user = base.rsplit("@", 1)[0]
        return f"{user}@127.0.0.1:{self.port}/{name}?sslmode=disable&gssencmode=disable"

    def start(self) -> None:
        """Accept connections (again) on the same port."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        """Close the listener and every open connection: new connections are refused."""
        with self.lock:
            pairs, self._pairs = self._pairs, []
            listener, self._listener = self._listener, None
        for pair in pairs:
            pair.close()
        if listener is not None:
            with suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()

    def freeze(self) -> None:
        """Hold every byte in both directions; connections stay open, nothing is refused."""
        self.flowing.clear()

    def thaw(self) -> None:
        """Pass what was held, and everything after it."""
        self.flowing.set()

    def freeze_after(self, marker: bytes) -> threading.Event:
        """Arm a one-shot partition that falls right after a request containing
        `marker` went through; the event is set once it fell."""
        trap = _Trap(marker, threading.Event())
        with self.lock:
            self.freeze_trap = trap
        return trap.sprung

    def freeze_if_marked(self, data: bytes) -> None:
        with self.lock:
            trap = self.freeze_trap
            if trap is None or trap.marker not in data:
                return
            self.freeze_trap = None
            self.flowing.clear()
        trap.sprung.set()

    def lose_reply_to(self, marker: bytes) -> threading.Event:
        """Arm a one-shot lost acknowledgement; the event is set once it happened."""
        assert self.framed, "lose_reply_to needs Proxy(..., framed=True)"
        trap = _Trap(marker, threading.Event())
        with self.lock:
            self.trap = trap
        return trap.sprung

    def hold_reply_to(self, marker: bytes) -> threading.Event:
        """Arm a one-shot partition right after the commit of the next statement
        containing `marker`; the event is set once it fell (thaw to end it)."""
        assert self.framed, "hold_reply_to needs Proxy(..., framed=True)"
        trap = _Trap(marker, threading.Event(), holds=True)
        with self.lock:
            self.trap = trap
        return trap.sprung

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._target)
            except OSError:
                client.close()
                continue
            pair = _Pair(self, client, upstream)
            with self.lock:
                cut = self._listener is not listener  # cut while this one was accepted
                if not cut:
                    self._pairs.append(pair)
            if cut:
                pair.close()
                return
            threading.Thread(target=pair.pump_requests, daemon=True).start()
            threading.Thread(target=pair.pump_replies, daemon=True).start()
