"""`python -m scheduler.healthcheck`, the image's HEALTHCHECK, against a real running node,
with each form `SCHEDULER_HTTP` can take in a container: the daemon's own port or none,
never another one."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.acceptance.processes import Node, environment, start_node
from tests.acceptance.test_http import _port

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def healthcheck(node: Node, **env: str) -> tuple[int, str]:
    """The check as Docker runs it in the daemon's container, the daemon being `node`;
    its exit status and its one line (stdout when healthy, stderr when not)."""
    done = subprocess.run(
        [sys.executable, "-m", "scheduler.healthcheck", "--pid", str(node.process.pid)],
        env=environment(**env),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    out = done.stdout if done.returncode == 0 else done.stderr
    assert (done.stdout if done.returncode else done.stderr) == "", done
    assert out.count("\n") == 1, out
    return done.returncode, out.strip()


def test_each_form_of_scheduler_http_against_a_running_node(
    tmp_path: Path, sqlite_url: str
) -> None:
    port = free_port()
    node = start_node(tmp_path, "checked", sqlite_url, "watched", SCHEDULER_HTTP=f"0.0.0.0:{port}")
    try:
        assert _port(node) == port
        asked = f"http://127.0.0.1:{port}/healthz"
        for form in (f"0.0.0.0:{port}", f":{port}", f"127.0.0.1:{port}"):
            assert healthcheck(node, SCHEDULER_HTTP=form) == (0, f"healthy: {asked} answered 200")
        assert healthcheck(node) == (
            0,
            "healthy: no HTTP endpoint to ask (SCHEDULER_HTTP is unset: /healthz is off); "
            "the container runs as long as the daemon does",
        )
        code, line = healthcheck(node, SCHEDULER_HTTP="")
        assert (code, line.split(" (")[0]) == (0, "healthy: no HTTP endpoint to ask")
        assert "SCHEDULER_HTTP is empty" in line
        assert healthcheck(node, SCHEDULER_HTTP="0.0.0.0") == (
            1,
            "error: SCHEDULER_HTTP: expected HOST:PORT such as 127.0.0.1:9464, got '0.0.0.0'",
        )
        code, line = healthcheck(node, SCHEDULER_HTTP=":0")
        assert code == 1
        assert line.startswith("error: SCHEDULER_HTTP: port 0 is a free port chosen at start")
    finally:
        assert node.stop() == 0
    code, line = healthcheck(node, SCHEDULER_HTTP=f"0.0.0.0:{port}")
    assert code == 1
    assert line.startswith(f"unhealthy: nothing answers at {asked} ("), line


def test_the_daemons_own_http_flag_wins_over_the_variable(tmp_path: Path, sqlite_url: str) -> None:
    """`docker run IMAGE run --http 0.0.0.0:PORT`: the variable the image sets names
    another port, where nothing listens; the check asks the daemon's."""
    port, elsewhere = free_port(), free_port()
    node = start_node(
        tmp_path,
        "flagged",
        sqlite_url,
        "watched",
        ["--http", f"0.0.0.0:{port}"],
        SCHEDULER_HTTP=f"0.0.0.0:{elsewhere}",
    )
    try:
        assert _port(node) == port
        wrong = f"0.0.0.0:{elsewhere}"
        assert healthcheck(node, SCHEDULER_HTTP=wrong) == (
            0,
            f"healthy: http://127.0.0.1:{port}/healthz answered 200",
        )
    finally:
        assert node.stop() == 0
