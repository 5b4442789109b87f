"""`ctx.key(item)` against a real HTTP service that honours `Idempotency-Key` (issue 44,
item 6): a node killed right after its call, the period taken over by another node as
its next attempt, the call made again with the same key, and the service acting once."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.acceptance.processes import start_node

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


class Payments(ThreadingHTTPServer):
    """Acts on the first request of each key; answers a repeat with the first answer."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.requests: Counter[str] = Counter()
        self.charges: dict[str, dict[str, object]] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/charges"


class _Handler(BaseHTTPRequestHandler):
    server: Payments

    def do_POST(self) -> None:
        key = self.headers["Idempotency-Key"]
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.requests[key] += 1
            fresh = key not in self.server.charges
            if fresh:
                self.server.charges[key] = body
            answer = json.dumps(self.server.charges[key]).encode()
        self.send_response(201 if fresh else 200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_period_taken_over_after_its_call_does_not_charge_twice(
    tmp_path: Path, postgres_url: str
) -> None:
    payments = Payments()
    threading.Thread(target=payments.serve_forever, daemon=True).start()
    log, hang = tmp_path / "executions.txt", tmp_path / "hang.txt"
    env = {"EXECUTION_LOG": str(log), "HANG_MARKER": str(hang), "PAYMENTS_URL": payments.url}
    nodes = {
        name: start_node(tmp_path, name, postgres_url, "idempotent", **env)
        for name in ("node-a", "node-b")
    }
    try:
        deadline = time.monotonic() + 30
        while not hang.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert hang.exists(), "no run reached its call"
        period, holder = hang.read_text().split()
        victim = next(node for node in nodes.values() if holder.startswith(node.name))
        victim.kill()  # SIGKILL, right after the call
        survivor = next(node for node in nodes.values() if node is not victim)
        survivor.wait_for(
            lambda event: event.get("event") == "run_succeeded" and event["period"] == period,
            timeout=60,
        )
        assert survivor.stop() == 0
    finally:
        for node in nodes.values():
            node.kill()
        payments.shutdown()
        payments.server_close()
    calls = [line.split() for line in log.read_text().splitlines()]
    again = [call for call in calls if call[0] == period]
    assert [attempt for _, attempt, _ in again] == ["1", "2"]  # called twice, by two nodes
    assert len({node for *_, node in again}) == 2
    by_period = Counter(call[0] for call in calls)
    assert payments.requests.total() == len(calls)
    # One charge a period: the taken-over period's second call was answered, not acted on.
    charged = Counter(str(body["period"]) for body in payments.charges.values())
    assert charged == Counter(set(by_period))
    assert max(payments.requests.values()) == 2
