"""`ctx.key(item)` against a real HTTP service that honours `Idempotency-Key` (issue 44,
item 6): a node killed right after its call, the period taken over by another node as
its next attempt, the call made again with the same key, and the service acting once;
and a holder frozen before its call (SIGSTOP), taken over, then thawed: it makes its
call after the takeover made its own, and the service still acts once. Two `scheduler
run` processes on PostgreSQL and on SQLite."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.acceptance.processes import Node, start_node

pytestmark = pytest.mark.slow


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


def _first_holder(hang: Path, nodes: dict[str, Node], poll: float) -> tuple[str, Node, Node]:
    """Once the first run has written its marker: its period, its node, and the other."""
    deadline = time.monotonic() + 30
    while not hang.exists() and time.monotonic() < deadline:
        time.sleep(poll)
    assert hang.exists(), "no run reached its marker"
    period, holder = hang.read_text().split()
    held = next(node for node in nodes.values() if holder.startswith(node.name))
    return period, held, next(node for node in nodes.values() if node is not held)


def test_a_period_taken_over_after_its_call_does_not_charge_twice(
    tmp_path: Path, database_url: str
) -> None:
    payments = Payments()
    threading.Thread(target=payments.serve_forever, daemon=True).start()
    log, hang = tmp_path / "executions.txt", tmp_path / "hang.txt"
    env = {"EXECUTION_LOG": str(log), "HANG_MARKER": str(hang), "PAYMENTS_URL": payments.url}
    nodes = {
        name: start_node(tmp_path, name, database_url, "idempotent", **env)
        for name in ("node-a", "node-b")
    }
    try:
        period, victim, survivor = _first_holder(hang, nodes, poll=0.05)
        victim.kill()  # SIGKILL, right after the call
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


def test_a_holder_frozen_before_its_call_and_thawed_after_the_takeover_charges_once(
    tmp_path: Path, database_url: str
) -> None:
    payments = Payments()
    threading.Thread(target=payments.serve_forever, daemon=True).start()
    log, hang = tmp_path / "executions.txt", tmp_path / "hang.txt"
    env = {
        "EXECUTION_LOG": str(log),
        "HANG_MARKER": str(hang),
        "PAYMENTS_URL": payments.url,
        "PAUSE_BEFORE_CALL": "1.5",
    }
    nodes = {
        name: start_node(tmp_path, name, database_url, "idempotent", **env)
        for name in ("node-a", "node-b")
    }
    try:
        period, frozen, survivor = _first_holder(hang, nodes, poll=0.01)
        frozen.signal(signal.SIGSTOP)  # within its pause: before its call
        survivor.wait_for(
            lambda event: event.get("event") == "run_succeeded" and event["period"] == period,
            timeout=60,
        )
        frozen.signal(signal.SIGCONT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if sum(1 for line in log.read_text().splitlines() if line.startswith(period)) == 2:
                break
            time.sleep(0.05)
        for node in nodes.values():
            assert node.stop() == 0
    finally:
        for node in nodes.values():
            node.signal(signal.SIGCONT)
            node.kill()
        payments.shutdown()
        payments.server_close()
    calls = [line.split() for line in log.read_text().splitlines()]
    again = [call for call in calls if call[0] == period]
    # The takeover called first (attempt 2), the thawed holder after it (attempt 1).
    assert [attempt for _, attempt, _ in again] == ["2", "1"], again
    assert again[0][2].startswith(survivor.name), again
    assert again[1][2].startswith(frozen.name), again
    assert payments.requests.total() == len(calls)
    charged = Counter(str(body["period"]) for body in payments.charges.values())
    assert charged == Counter({call[0] for call in calls})
    (twice,) = [key for key, count in payments.requests.items() if count == 2]
    assert json.loads(json.dumps(payments.charges[twice]))["attempt"] == 2, (
        "the takeover's call acted"
    )
