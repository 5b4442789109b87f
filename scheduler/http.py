"""The operations endpoint of `scheduler run --http HOST:PORT`: /healthz, /readyz, /metrics,
and the web console on every other path when its extra is installed.

A small threaded server on a daemon thread; off unless asked for. The three endpoints
never write: /healthz reads when the node's main loop was due to take its next turn
(`scheduler.node.turns`) and fails only when the loop is past that and a grace; /readyz
asks the database `SELECT 1`, checks the schema and the age of the node's last
heartbeat; /metrics renders `scheduler.metrics.REGISTRY`. The console
(`scheduler.console`, a WSGI application) is called for the other paths; it is also
what `scheduler console` serves, with no node (and so no heartbeat) behind it.
"""

from __future__ import annotations

import gzip
import json
import socket
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import IO, TYPE_CHECKING, Any, Protocol, cast
from urllib.parse import unquote, urlsplit
from wsgiref.handlers import SimpleHandler

import structlog
from prometheus_client.exposition import choose_encoder
from structlog.typing import FilteringBoundLogger

from scheduler import console, metrics
from scheduler.errors import UserError
from scheduler.http_address import HttpAddress, parse_address
from scheduler.model import SILENT_BEATS
from scheduler.store import migrate, queries
from scheduler.store.database import Database
from scheduler.store.faults import StoreError, first_line

__all__ = ["HttpAddress", "OperationsServer", "Readiness", "accepts_gzip", "bind", "parse_address"]

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIApplication

# Bodies smaller than this go uncompressed: gzip would save nothing worth its time.
GZIP_FROM_BYTES = 1024
# Fast: a 10,000-job scrape compresses in a fraction of its render time.
GZIP_LEVEL = 1


class Heartbeat(Protocol):
    """The node's heartbeat thread as /readyz sees it (`scheduler.node.heartbeat.Heartbeat`)."""

    @property
    def last_beat(self) -> float | None: ...

    @property
    def interval(self) -> float: ...


class MainLoop(Protocol):
    """The node's main loop as /healthz sees it (`scheduler.node.turns.LoopTurns`)."""

    def stalled(self) -> str | None: ...


class Readiness:
    """Is this node fit to serve: database reachable, schema current, heartbeat fresh."""

    def __init__(self, database: Database, heartbeat: Heartbeat | None) -> None:
        self._database = database
        self._heartbeat = heartbeat
        self._since = time.monotonic()
        self._was_ready: bool | None = None
        self._lock = threading.Lock()
        self._log: FilteringBoundLogger = structlog.get_logger("scheduler")

    def checks(self) -> dict[str, str]:
        """Each check's verdict: "ok" or why not."""
        verdicts = {"database": "ok", "schema": "ok", "heartbeat": self._heartbeat_verdict()}
        try:
            queries.probe(self._database)
        except (StoreError, UserError) as error:
            verdicts["database"] = first_line(error)
            verdicts["schema"] = "not checked: no database"
            return self._note(verdicts)
        try:
            migrate.require_current_schema(self._database)
        except (StoreError, UserError) as error:
            verdicts["schema"] = first_line(error)
        return self._note(verdicts)

    def _heartbeat_verdict(self) -> str:
        if self._heartbeat is None:
            return "ok"  # `scheduler console`: no node here to beat
        last = self._heartbeat.last_beat
        age = time.monotonic() - (self._since if last is None else last)
        limit = SILENT_BEATS * self._heartbeat.interval
        if age < limit:
            return "ok"
        return f"no heartbeat written for {age:.1f}s (limit {limit:g}s)"

    def _note(self, verdicts: dict[str, str]) -> dict[str, str]:
        """Log when readiness flips, not on every probe."""
        ready = all(verdict == "ok" for verdict in verdicts.values())
        with self._lock:
            changed, self._was_ready = ready != self._was_ready, ready
        if changed and ready:
            self._log.info("node_ready")
        elif changed:
            failing = {name: verdict for name, verdict in verdicts.items() if verdict != "ok"}
            self._log.warning("node_unready", failing=failing)
        return verdicts


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    readiness: Readiness | None = None
    main_loop: MainLoop | None = None
    console: WSGIApplication | None = None


class _Server6(_Server):
    address_family = socket.AF_INET6


OPERATIONS = ("/healthz", "/readyz", "/metrics")


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "scheduler"

    def do_GET(self) -> None:
        self._answer(with_body=True)

    def do_HEAD(self) -> None:
        """What GET would answer, headers only (load balancers and uptime checks ask so)."""
        self._answer(with_body=False)

    def do_POST(self) -> None:
        """The console's actions; the three endpoints take no POST."""
        if self.server.console is not None and urlsplit(self.path).path not in OPERATIONS:
            self._wsgi(self.server.console)
        else:
            self._send(HTTPStatus.METHOD_NOT_ALLOWED, b"GET or HEAD\n", "text/plain", True)

    def _answer(self, *, with_body: bool) -> None:
        path = urlsplit(self.path).path
        if path == "/healthz":
            self._health(with_body)
        elif path == "/readyz":
            self._ready(with_body)
        elif path == "/metrics":
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            self._send(HTTPStatus.OK, encoder(metrics.REGISTRY), content_type, with_body)
        elif self.server.console is not None:
            self._wsgi(self.server.console)
        elif path == "/":
            hint = f"the web console is not installed here: {console.INSTALL_HINT}\n"
            self._send(HTTPStatus.NOT_FOUND, hint.encode(), "text/plain", with_body)
        else:
            self._send(
                HTTPStatus.NOT_FOUND,
                b"try /healthz, /readyz or /metrics\n",
                "text/plain",
                with_body,
            )

    def _wsgi(self, app: WSGIApplication) -> None:
        """Hand the request to a WSGI application (the console), as wsgiref's server does."""
        handler = SimpleHandler(
            self.rfile, cast(IO[bytes], self.wfile), sys.stderr, self._environ(), multithread=True
        )
        handler.server_software = self.server_version
        handler.http_version = "1.0"
        handler.run(app)
        self.close_connection = True

    def _environ(self) -> dict[str, Any]:
        path, _, query = self.path.partition("?")
        host, port = self.server.server_address[:2]
        environ: dict[str, Any] = {
            "REQUEST_METHOD": self.command,
            "SCRIPT_NAME": "",
            "PATH_INFO": unquote(path, "iso-8859-1"),
            "QUERY_STRING": query,
            "SERVER_NAME": str(host),
            "SERVER_PORT": str(port),
            "SERVER_PROTOCOL": self.request_version,
            "REMOTE_ADDR": self.client_address[0],
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": self.headers.get("Content-Length", ""),
        }
        for key, value in self.headers.items():
            name = "HTTP_" + key.upper().replace("-", "_")
            if name not in ("HTTP_CONTENT_TYPE", "HTTP_CONTENT_LENGTH"):
                environ[name] = f"{environ[name]},{value}" if name in environ else value
        return environ

    def _health(self, with_body: bool) -> None:
        """Alive unless the main loop is past its own due time and the grace; no
        database call and no log line (a wedged node may be wedged in writing one)."""
        main_loop = self.server.main_loop
        stalled = main_loop.stalled() if main_loop is not None else None
        if stalled is None:
            self._send(HTTPStatus.OK, b"ok\n", "text/plain; charset=utf-8", with_body)
        else:
            body = f"{stalled}\n".encode()
            self._send(HTTPStatus.SERVICE_UNAVAILABLE, body, "text/plain; charset=utf-8", with_body)

    def _ready(self, with_body: bool) -> None:
        readiness = self.server.readiness
        verdicts = readiness.checks() if readiness else {"node": "starting"}
        ready = all(verdict == "ok" for verdict in verdicts.values())
        body = json.dumps({"ready": ready, "checks": verdicts}).encode() + b"\n"
        status = HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE
        self._send(status, body, "application/json", with_body)

    def _send(self, status: HTTPStatus, body: bytes, content_type: str, with_body: bool) -> None:
        """Gzip a large body when the client accepts it (a fleet's /metrics shrinks ~10x)."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if len(body) >= GZIP_FROM_BYTES and accepts_gzip(self.headers.get("Accept-Encoding")):
            body = gzip.compress(body, compresslevel=GZIP_LEVEL)
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Vary", "Accept-Encoding")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if with_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Probes arrive every few seconds; their access lines would drown the job events."""


def accepts_gzip(header: str | None) -> bool:
    """`Accept-Encoding: gzip` (or `*`), unless given a zero weight (`gzip;q=0`)."""
    for part in (header or "").split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*"):
            weight = params.strip().removeprefix("q=")
            try:
                return not params or float(weight) > 0
            except ValueError:
                return True
    return False


class OperationsServer:
    """Bound early (a busy port is a user error before anything is written), served later."""

    def __init__(self, address: HttpAddress) -> None:
        console.check_settings()  # a malformed SCHEDULER_CONSOLE_AUTH, before anything is written
        try:
            kind = _Server6 if ":" in address.host else _Server
            self._server = kind((address.host, address.port), _Handler)
        except OSError as error:
            raise UserError(f"--http: cannot listen on {address}: {error.strerror}") from None
        self._thread = threading.Thread(target=self._server.serve_forever, name="http", daemon=True)

    @property
    def address(self) -> HttpAddress:
        host, port = self._server.server_address[:2]
        return HttpAddress(str(host), int(port))

    def start(
        self, database: Database, heartbeat: Heartbeat | None, main_loop: MainLoop | None = None
    ) -> None:
        """Serve; `heartbeat` and `main_loop` are the node's (None for `scheduler
        console`, which has no node)."""
        self._server.readiness = Readiness(database, heartbeat)
        self._server.main_loop = main_loop
        self._server.console = console.load(database)
        metrics.watch(database)
        self._thread.start()
        address = self.address
        structlog.get_logger("scheduler").info(
            "http_listening", host=address.host, port=address.port
        )

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()


def bind(raw: str | None) -> OperationsServer | None:
    """The server `--http` asks for, bound but not serving yet; None when it is off."""
    return OperationsServer(parse_address(raw)) if raw else None
