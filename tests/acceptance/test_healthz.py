"""/healthz sees a wedged main loop, and only a wedged one: a real `scheduler run --http`
whose main loop is stuck for real answers 503 and says by how long, and 200 again once
it moves; an idle node sleeping until a period an hour away, and a node under load,
answer 200 all along."""

from __future__ import annotations

import fcntl
import os
import subprocess
import threading
import time
from contextlib import suppress
from pathlib import Path

import pytest

from tests.acceptance.processes import (
    SCHEDULER,
    Node,
    environment,
    jobmods,
    run_command,
    start_node,
)
from tests.acceptance.tcp_proxy import Proxy
from tests.acceptance.test_healthcheck import free_port, healthcheck
from tests.acceptance.test_http import _port, fetch, wait_until

pytestmark = pytest.mark.slow
# The database freeze and the grace it must not trip: the grace is more than twice the
# longest block of a claim (a connection's 5 s timeout; a call's deadline is 1.5 s), the
# freeze 8 s longer than the grace, so that a loop blocked for the whole of it would fail.
FROZEN_S = 20
FROZEN_GRACE_S = 12
# The smallest pipe Linux allows (a page): a stalled reader blocks the node within seconds.
SMALL_PIPE = 4096


class StdoutReader:
    """Reads a node's stdout pipe into its log file, and can stop reading: a log
    collector that stalls (Docker's default `blocking` log mode with a driver that is
    not draining, a `| tee` stuck downstream). The node's next write then blocks."""

    def __init__(self, process: subprocess.Popen[bytes], log_path: Path) -> None:
        assert process.stdout is not None
        self._stdout = process.stdout
        self._pipe = process.stdout.fileno()
        fcntl.fcntl(self._pipe, fcntl.F_SETPIPE_SZ, SMALL_PIPE)
        self._log_path = log_path
        self.reading = threading.Event()
        self.reading.set()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Once the node has exited: read to the end, then close the pipe."""
        self.reading.set()
        self._thread.join(timeout=10)
        self._stdout.close()

    def _pump(self) -> None:
        with self._log_path.open("ab") as out:
            while True:
                self.reading.wait()
                data = b""
                with suppress(OSError):
                    data = os.read(self._pipe, 65536)
                if not data:
                    return
                out.write(data)
                out.flush()


def start_piped_node(
    cwd: Path, name: str, database_url: str, extra: list[str]
) -> tuple[Node, StdoutReader]:
    """A node whose stdout is a pipe this test reads (or stops reading)."""
    log_path = cwd / f"{name}.log"
    process = subprocess.Popen(
        [
            SCHEDULER,
            "run",
            "--database-url",
            database_url,
            "--jobs",
            jobmods("watched"),
            "--log-format",
            "json",
            "--node-name",
            name,
            *extra,
        ],
        cwd=cwd,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    return Node(name, process, log_path), StdoutReader(process, log_path)


def test_a_main_loop_wedged_in_a_write_fails_healthz_until_it_moves_again(
    tmp_path: Path, postgres_url: str
) -> None:
    """The node's next `run_claimed` lines never leave: its main loop blocks in that
    write (or on the lock of a thread blocked in its own). /healthz writes no line and
    reads no database, so it still answers, and says so."""
    node, reader = start_piped_node(
        tmp_path,
        "wedged",
        postgres_url,
        ["--http", f"127.0.0.1:{free_port()}", "--healthz-grace", "2s"],
    )
    try:
        port = _port(node)
        node.wait_for(lambda event: event.get("event") == "run_succeeded", timeout=15)
        assert fetch(port, "/healthz") == (200, "ok\n")

        reader.reading.clear()
        wait_until(lambda: fetch(port, "/healthz")[0] == 503, timeout=60, what="503")
        status, body = fetch(port, "/healthz")
        assert status == 503
        assert body.count("\n") == 1, body
        assert body.endswith("\n"), body
        assert body.startswith("main loop overdue: its next turn was due "), body
        late = float(body.split("was due ")[1].split("s ago")[0])
        assert late >= 2.0, body
        assert "(grace 2s, --healthz-grace)" in body, body
        time.sleep(1.5)
        later = float(fetch(port, "/healthz")[1].split("was due ")[1].split("s ago")[0])
        assert later >= late + 1.0, "overdue grows while the loop stays stuck"
        code, line = healthcheck(node)  # the image's HEALTHCHECK, reading the daemon's --http
        assert code == 1
        assert line.startswith(f"unhealthy: http://127.0.0.1:{port}/healthz answered 503: "), line
        assert "main loop overdue" in line, line
        claimed = sum(1 for event in node.events() if event.get("event") == "run_claimed")

        reader.reading.set()
        wait_until(lambda: fetch(port, "/healthz") == (200, "ok\n"), timeout=30, what="200")
        node.wait_for(lambda event: event.get("event") == "run_claimed", count=claimed + 2)
    finally:
        reader.reading.set()
        assert node.stop() == 0
        reader.close()


def test_an_idle_node_sleeping_until_a_period_an_hour_away_stays_healthy(
    tmp_path: Path, sqlite_url: str
) -> None:
    """With a grace of 1 s, "no turn in N seconds" would fail this node within a second
    or two: its loop sleeps until the period an hour away (no summary line to wake for).
    Start-up counts as its first turn, which a loaded machine may make later than 1 s:
    the watch begins once the node has started and said it is healthy."""
    node = start_node(
        tmp_path,
        "idle",
        sqlite_url,
        "distant",
        ["--http", "127.0.0.1:0", "--healthz-grace", "1s", "--summary-interval", "0"],
    )
    try:
        port = _port(node)
        node.wait_for(lambda event: event.get("event") == "node_started", timeout=30)
        wait_until(lambda: fetch(port, "/healthz")[0] == 200, timeout=15, what="healthy")
        watched_from = time.monotonic()
        answers = []
        while time.monotonic() - watched_from < 8:
            answers.append(fetch(port, "/healthz"))
            time.sleep(0.2)
        assert set(answers) == {(200, "ok\n")}, answers
        assert len(answers) >= 20
        assert not [event for event in node.events() if event.get("event") == "run_claimed"]
    finally:
        assert node.stop() == 0


def test_a_node_under_load_stays_healthy(tmp_path: Path, postgres_url: str) -> None:
    """200 jobs due every second, each run 10 ms: the loop claims a batch every second
    while the workers, the starter and the writer compete for the two cores."""
    node = start_node(
        tmp_path,
        "loaded",
        postgres_url,
        "stampede",
        ["--http", "127.0.0.1:0", "--healthz-grace", "2s"],
        EXECUTION_LOG=str(tmp_path / "executions.log"),
    )
    try:
        port = _port(node)
        node.wait_for(lambda event: event.get("event") == "run_succeeded", timeout=30)
        watched_from = time.monotonic()
        answers = []
        while time.monotonic() - watched_from < 12:
            answers.append(fetch(port, "/healthz"))
            time.sleep(0.2)
        assert set(answers) == {(200, "ok\n")}, answers
        succeeded = sum(1 for event in node.events() if event.get("event") == "run_succeeded")
        assert succeeded >= 1000, f"only {succeeded} runs: not the load this test is about"
    finally:
        assert node.stop() == 0


def test_a_database_that_stops_answering_is_not_a_wedged_loop(
    tmp_path: Path, postgres_url: str
) -> None:
    """The node's database is reached through a proxy that stops passing bytes for 20 s:
    every claim the loop makes meanwhile blocks, but no longer than a database call's
    deadline (1.5 s, half the job's 3 s lease) or a connection's timeout (5 s), and the
    loop goes on taking its turns (a claim fails every 5 s). A restart would not bring the
    database back: /healthz stays 200 (with a grace of 12 s, more than twice those
    bounds) while the loop fails its claims. The freeze outlasts the grace by 8 s: a
    loop that stayed blocked in a call for the whole freeze would answer 503 for its
    last 7 s or so."""
    proxy = Proxy(int(postgres_url.rsplit(":", 1)[1].split("/", maxsplit=1)[0]))
    proxy.start()
    node = start_node(
        tmp_path,
        "partitioned",
        proxy.url(postgres_url),
        "watched",
        ["--http", "127.0.0.1:0", "--healthz-grace", f"{FROZEN_GRACE_S}s"],
    )
    try:
        port = _port(node)
        node.wait_for(lambda event: event.get("event") == "run_succeeded", timeout=15)
        failed_before = sum(1 for e in node.events() if e.get("event") == "claim_failed")
        proxy.freeze()
        frozen_from = time.monotonic()
        answers = []
        while time.monotonic() - frozen_from < FROZEN_S:
            answers.append(fetch(port, "/healthz"))
            time.sleep(0.5)
        failed = sum(1 for e in node.events() if e.get("event") == "claim_failed")
        proxy.thaw()
        assert set(answers) == {(200, "ok\n")}, answers
        assert failed - failed_before >= 3, "the loop kept trying (and failing) to claim"
        node.wait_for(lambda event: event.get("event") == "run_succeeded", count=2, timeout=30)
    finally:
        proxy.thaw()
        assert node.stop() == 0
        proxy.cut()


def test_a_grace_that_is_not_a_positive_duration_is_refused(
    tmp_path: Path, sqlite_url: str
) -> None:
    for grace, expected in [("0s", "must be longer than 0s"), ("soon", "--healthz-grace: ")]:
        result = run_command(
            ["run", "--database-url", sqlite_url, "--jobs", "watched", "--healthz-grace", grace],
            tmp_path,
        )
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("error: --healthz-grace: "), result.stderr
        assert expected in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
