"""`scheduler run --http`: /healthz, /readyz and /metrics of a real node over real HTTP."""

from __future__ import annotations

import gzip
import json
import socket
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.acceptance.processes import Node, run_command, start_node
from tests.acceptance.records import run_rows
from tests.databases import admin_connection

pytestmark = pytest.mark.slow
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def fetch(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def scrape(port: int) -> Samples:
    status, text = fetch(port, "/metrics")
    assert status == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def runs_of(samples: Samples, status: str) -> float:
    return samples.get(("scheduler_runs_total", (("job", "watched"), ("status", status))), 0.0)


def table_counts(database_url: str) -> tuple[Counter[str], datetime]:
    rows = run_rows(database_url, "watched")
    finished = [row["finished_at"] for row in rows if row["status"] == "succeeded"]
    return Counter(row["status"] for row in rows), max(finished)


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout}s"
        time.sleep(0.2)


def mid_second() -> None:
    """Periods fire on whole seconds and end within milliseconds: look in between."""
    time.sleep(1.4 - datetime.now(UTC).microsecond / 1e6 % 1)


def _admin(sql: str) -> None:
    with admin_connection() as admin:
        admin.execute(sql)


def _port(node: Node) -> int:
    event = node.wait_for(lambda event: event.get("event") == "http_listening", timeout=15)
    port: Any = event["port"]
    return int(port)


def test_metrics_match_the_runs_table_and_readyz_follows_the_database(
    tmp_path: Path, postgres_url: str
) -> None:
    node = start_node(
        tmp_path,
        "observed",
        postgres_url,
        "watched",
        ["--http", "127.0.0.1:0"],
        FAIL_EVERY="3",
        SCHEDULER_METRICS_PER_JOB="true",
    )
    name = postgres_url.rsplit("/", 1)[1]
    try:
        port = _port(node)
        assert fetch(port, "/healthz") == (200, "ok\n")
        status, body = fetch(port, "/readyz")
        assert (status, json.loads(body)["ready"]) == (200, True), body
        assert fetch(port, "/nowhere")[0] == 404

        wait_until(
            lambda: (
                runs_of(scrape(port), "succeeded") >= 4 and runs_of(scrape(port), "failed") >= 1
            ),
            timeout=15,
            what="four successes and a failure",
        )
        mid_second()
        before = scrape(port)
        counts, last_success = table_counts(postgres_url)
        time.sleep(0.2)
        after = scrape(port)
        for outcome in ("succeeded", "failed"):
            assert runs_of(before, outcome) <= counts[outcome] <= runs_of(after, outcome), outcome
        assert set(counts) <= {"succeeded", "failed", "claimed", "running"}
        key = ("scheduler_run_duration_seconds_count", (("job", "watched"),))
        finished = counts["succeeded"] + counts["failed"]
        assert before[key] <= finished <= after[key]
        claims_won = before[("scheduler_claims_total", (("result", "won"),))]
        assert (
            claims_won
            <= sum(counts.values())
            <= after[("scheduler_claims_total", (("result", "won"),))]
        )
        assert before[("scheduler_claims_total", (("result", "lost"),))] == 0
        lag_count = before[("scheduler_run_start_lag_seconds_count", (("job", "watched"),))]
        lag_sum = before[("scheduler_run_start_lag_seconds_sum", (("job", "watched"),))]
        assert lag_count >= finished - 1
        assert 0 <= lag_sum / lag_count < 1.0, "periods start within a second on average"
        gauge = ("scheduler_last_success_timestamp_seconds", (("job", "watched"),))
        assert before[gauge] <= last_success.timestamp() <= after[gauge]
        assert before[("scheduler_overdue_jobs", ())] in (0, 1)
        assert ("process_resident_memory_bytes", ()) in before

        # The database goes away: no new connections, and the open ones cut.
        _admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        _admin(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")
        wait_until(lambda: fetch(port, "/readyz")[0] == 503, timeout=10, what="unready")
        checks = json.loads(fetch(port, "/readyz")[1])["checks"]
        assert "not currently accepting connections" in checks["database"], checks
        assert fetch(port, "/healthz")[0] == 200, "the process itself is alive"

        _admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        wait_until(lambda: fetch(port, "/readyz")[0] == 200, timeout=10, what="ready again")
    finally:
        _admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        assert node.stop() == 0
    flips = [e["event"] for e in node.events() if e["event"] in ("node_ready", "node_unready")]
    assert flips == ["node_ready", "node_unready", "node_ready"]


def test_a_busy_or_malformed_http_address_is_refused(tmp_path: Path, sqlite_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = f"127.0.0.1:{taken.getsockname()[1]}"
        for address, expected in [(busy, "cannot listen on"), ("localhost", "expected HOST:PORT")]:
            result = run_command(
                ["run", "--database-url", sqlite_url, "--jobs", "watched", "--http", address],
                tmp_path,
            )
            assert result.returncode == 2, result.stderr
            assert result.stderr.startswith(f"error: --http: {expected}"), result.stderr
            assert len(result.stderr.strip().splitlines()) == 1


def _request(port: int, path: str, method: str = "GET", **headers: str) -> tuple[int, Any, bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    for name, value in headers.items():
        request.add_header(name.replace("_", "-"), value)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def test_head_on_every_endpoint_and_gzip_when_asked(tmp_path: Path, sqlite_url: str) -> None:
    node = start_node(tmp_path, "scraped", sqlite_url, "watched", ["--http", "127.0.0.1:0"])
    try:
        port = _port(node)
        wait_until(lambda: fetch(port, "/readyz")[0] == 200, timeout=15, what="ready")
        node.wait_for(lambda event: event.get("event") == "run_succeeded", timeout=15)
        for path, status in (("/healthz", 200), ("/readyz", 200), ("/metrics", 200), ("/x", 404)):
            got, headers, body = _request(port, path, "HEAD")
            assert (got, body) == (status, b""), path
            assert int(headers["Content-Length"]) > 0, path
        plain_status, plain_headers, plain = _request(port, "/metrics")
        assert plain_status == 200
        assert plain_headers["Content-Encoding"] is None
        status, headers, packed = _request(port, "/metrics", Accept_Encoding="gzip, deflate")
        assert (status, headers["Content-Encoding"]) == (200, "gzip")
        assert int(headers["Content-Length"]) == len(packed) < len(plain) / 2
        text = gzip.decompress(packed).decode()
        assert "scheduler_run_duration_seconds_count " in text, "one histogram for all jobs"
        assert 'scheduler_run_duration_seconds_count{job="watched"}' not in text
        names = {family.name for family in text_string_to_metric_families(text)}
        assert {
            "scheduler_runs_in_progress",
            "scheduler_stuck_items",
            "scheduler_build_info",
        } <= names
        refused = _request(port, "/metrics", Accept_Encoding="gzip;q=0")[1]
        assert refused["Content-Encoding"] is None
    finally:
        assert node.stop() == 0
