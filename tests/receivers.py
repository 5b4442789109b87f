"""A real HTTP receiver on 127.0.0.1 for tests of what the scheduler sends out (webhooks,
Sentry envelopes): it records every request and answers with the status it is told."""

from __future__ import annotations

import gzip
import json
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    url: str
    requests: list[Received] = field(default_factory=list)
    # Statuses to answer, in turn; 200 once they run out.
    statuses: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def envelope_items(self) -> list[tuple[dict[str, Any], Any]]:
        """Sentry envelopes as (item header, payload) pairs."""
        found = []
        for request in list(self.requests):
            lines = request.body.split(b"\n")
            index = 1
            while index + 1 < len(lines):
                header = json.loads(lines[index])
                payload = lines[index + 1]
                found.append((header, json.loads(payload) if payload.strip() else None))
                index += 2
        return found

    def check_ins(self) -> list[dict[str, Any]]:
        return [
            payload for header, payload in self.envelope_items() if header.get("type") == "check_in"
        ]


@contextmanager
def receiver() -> Iterator[Receiver]:
    state = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            encoding = self.headers.get("Content-Encoding", "")
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            with state.lock:
                state.requests.append(Received(self.path, dict(self.headers.items()), body))
                status = state.statuses.pop(0) if state.statuses else 200
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
