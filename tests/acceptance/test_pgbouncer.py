"""Two real nodes through PgBouncer in transaction pooling mode: no period runs twice and
overlap protection holds, although consecutive transactions of one client land on
different server connections (Debian's pgbouncer, started here on a free loopback port)."""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import psycopg
import pytest

from scheduler.model import Due, Started, StartRequest
from scheduler.states import Reason, RunStatus
from scheduler.store import claims, writes
from scheduler.store.database import open_database
from tests.acceptance.processes import Node, run_command, start_node
from tests.acceptance.records import missing_seconds, run_rows
from tests.databases import POSTGRES_ADMIN_URL

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

SECONDS = 14
# Fewer server connections than the nodes' clients, so that they must share them.
POOL_SIZE = 3


def _pgbouncer() -> str:
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
    if found:
        return found
    message = "pgbouncer is not installed; scripts/ensure-pgbouncer installs Debian's package"
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _config(folder: Path, port: int) -> Path:
    server = urlsplit(POSTGRES_ADMIN_URL)
    user = unquote(server.username or "postgres")
    password = unquote(server.password or "")
    (folder / "users.txt").write_text(f'"{user}" "{password}"\n')
    config = folder / "pgbouncer.ini"
    config.write_text(
        "[databases]\n"
        f"* = host={server.hostname or '127.0.0.1'} port={server.port or 5432}\n"
        "[pgbouncer]\n"
        "listen_addr = 127.0.0.1\n"
        f"listen_port = {port}\n"
        "unix_socket_dir =\n"
        f"auth_type = {'md5' if password else 'trust'}\n"
        f"auth_file = {folder / 'users.txt'}\n"
        "pool_mode = transaction\n"
        f"default_pool_size = {POOL_SIZE}\n"
        "max_client_conn = 200\n"
        "server_check_delay = 0\n"
    )
    for path in (folder, *folder.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return config


def _wait_until_it_answers(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"pgbouncer exited: {log.read_text()}", pytrace=False)
        try:
            psycopg.connect(url, connect_timeout=2).close()
        except psycopg.OperationalError:
            time.sleep(0.1)
        else:
            return
    pytest.fail(f"pgbouncer did not answer: {log.read_text()}", pytrace=False)


class Bouncer:
    """A PgBouncer of a test's own in front of the test PostgreSQL, which the test may
    kill and start again on the same port.

    Its folder lies outside pytest's private tmp, because pgbouncer refuses to run as
    root and, when we are root, drops to `nobody`, who must be able to read it."""

    def __init__(self) -> None:
        self._binary = _pgbouncer()
        self.port = _free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="scheduler-pgbouncer-"))
        self._config = _config(self.folder, self.port)
        server = urlsplit(POSTGRES_ADMIN_URL)
        credentials = server.netloc.rpartition("@")[0]
        netloc = f"{credentials}@127.0.0.1:{self.port}".lstrip("@")
        self.url = server._replace(netloc=netloc).geturl()
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [self._binary, str(self._config)]
        if os.geteuid() == 0:
            command[1:1] = ["-u", "nobody"]
        log = self.folder / "pgbouncer.log"
        with log.open("ab") as out:
            self._process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        _wait_until_it_answers(self.url, self._process, log)

    def kill(self) -> None:
        """SIGKILL: every client connection drops at once, as when a pooler restarts."""
        if self._process is not None:
            self._process.kill()
            self._process.wait(timeout=10)

    def close(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.wait(timeout=10)
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture
def bouncer() -> Iterator[Bouncer]:
    pooler = Bouncer()
    try:
        pooler.start()
        yield pooler
    finally:
        pooler.close()


@pytest.fixture
def pgbouncer(bouncer: Bouncer) -> str:
    """The base URL of a PgBouncer of the test's own."""
    return bouncer.url.rpartition("/")[0]


def _through(pgbouncer: str, database_url: str) -> str:
    return f"{pgbouncer}/{database_url.rpartition('/')[2]}"


def test_two_nodes_through_transaction_pooling_run_each_period_once(
    tmp_path: Path, pgbouncer: str, empty_postgres_url: str
) -> None:
    url = _through(pgbouncer, empty_postgres_url)
    migrated = run_command(["migrate", "--database-url", url, "--log-format", "json"], tmp_path)
    assert migrated.returncode == 0, migrated.stderr + migrated.stdout

    execution_log = tmp_path / "executions.txt"
    nodes = [
        start_node(
            tmp_path,
            f"pooled{n}",
            url,
            "ticker,sleeper",
            EXECUTION_LOG=str(execution_log),
            SLEEP_SECONDS="2.5",
        )
        for n in range(2)
    ]
    _run_for(nodes, SECONDS)

    ticks = run_rows(empty_postgres_url, "tick")
    ran = Counter(
        line.split()[0]
        for line in execution_log.read_text().splitlines()
        if not line.endswith(" done")
    )
    assert len(ticks) >= SECONDS - 3
    assert [period for period, times in ran.items() if times > 1] == [], "a period ran twice"
    assert sorted(ran) == sorted(row["period"].isoformat() for row in ticks)
    assert missing_seconds([row["period"] for row in ticks]) == []
    assert {row["status"] for row in ticks} == {RunStatus.SUCCEEDED}

    _assert_no_overlap(run_rows(empty_postgres_url, "sleeper"))
    for node in nodes:
        (mode,) = [e for e in node.events() if e.get("event") == "liveness_mode"]
        assert mode["mode"] == "lease", "behind a pooler a session lock means nothing"
        assert mode["prepared_statements"] is False, "a pooler may not keep them"
        (wakeups,) = [e for e in node.events() if e.get("event") == "wakeups"]
        assert wakeups["mode"] == "poll", "behind a pooler no session can LISTEN: it polls"
        text = node.log_path.read_text()
        for trouble in ("prepared statement", "claim_failed", "database_unavailable", "Traceback"):
            assert trouble not in text, f"{node.log_path.name}: {trouble}\n{text[-3000:]}"


def _run_for(nodes: list[Node], seconds: float) -> None:
    try:
        for node in nodes:
            node.wait_for(lambda event: event.get("event") == "node_started")
        time.sleep(seconds)
    finally:
        codes = [node.stop() for node in nodes]
    assert codes == [0] * len(nodes), [node.log_path.read_text()[-2000:] for node in nodes]


def _assert_no_overlap(rows: list[dict[str, Any]]) -> None:
    """The 2.5 s sleeper fires every second on two nodes: never two runs at once, and the
    periods that met a running one are recorded as skipped with reason overlap."""
    ran = sorted(
        (row["started_at"], row["finished_at"])
        for row in rows
        if row["status"] == RunStatus.SUCCEEDED
    )
    skipped = [row for row in rows if row["status"] == RunStatus.SKIPPED]
    assert len(ran) >= 3
    for (_, finished), (started, _) in itertools.pairwise(ran):
        assert started >= finished, f"two sleeper runs overlapped: {ran}"
    assert len(skipped) >= len(ran)
    assert {row["reason"] for row in skipped} == {Reason.OVERLAP}


def test_a_start_batch_travels_whole_through_transaction_pooling(
    tmp_path: Path, pgbouncer: str, empty_postgres_url: str
) -> None:
    """A start batch in turn is one transaction sent in one round trip (BEGIN, bounds and
    job locks, the start, COMMIT, pipelined): through PgBouncer it still lands whole on
    one server connection, and the later period of a job waits behind the earlier one."""
    url = _through(pgbouncer, empty_postgres_url)
    migrated = run_command(["migrate", "--database-url", url, "--log-format", "json"], tmp_path)
    assert migrated.returncode == 0, migrated.stderr + migrated.stdout
    database = open_database(url)
    try:
        period = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
        due = [Due("batch", period + timedelta(minutes=n), 30) for n in range(2)]
        won = claims.claim(database, due, "pooled").won
        first, second = sorted(won, key=lambda claim: claim.period)
        for _ in range(3):  # each time on whichever server connection PgBouncer lends
            _, started = writes.record(
                database, [], [StartRequest(second, True), StartRequest(first, True)]
            )
            assert started[0] is Started.WAIT
            assert started[1] is Started.STARTED
    finally:
        database.dispose()


def test_a_pooler_restart_loses_no_period_to_overlap(
    tmp_path: Path, bouncer: Bouncer, postgres_url: str
) -> None:
    """Issue 41, item 5: PgBouncer killed and started again 2 s later under a node that
    runs an every-second 100 ms job. A body that returned while its outcome write waits
    for the pooler makes no later period `skipped (overlap)`: they wait and run."""
    url = f"{bouncer.url.rpartition('/')[0]}/{postgres_url.rpartition('/')[2]}"
    log = tmp_path / "executions.txt"
    node = start_node(tmp_path, "pooled", url, "blunt", EXECUTION_LOG=str(log))
    try:
        node.wait_for(lambda e: e.get("event") == "node_started")
        time.sleep(4)
        for _ in range(3):
            bouncer.kill()
            time.sleep(2)
            bouncer.start()
            restarted = time.time()
            time.sleep(4)
        # Past the last restart's backlog (its periods claimed, judged and run, about
        # 2 s after it): until a brisk body of a period due 4 s after the restart or
        # later ended, or 6 s more as before.
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline and not _brisk_ran_since(log, restarted + 4):
            time.sleep(0.2)
    finally:
        assert node.stop() == 0
    bodies = [line.split() for line in log.read_text().splitlines()]
    ran: dict[str, list[tuple[float, float]]] = {}
    starts = {(w[4], w[0], w[2]): float(w[3].split("@")[1]) for w in bodies if "start@" in w[3]}
    for w in bodies:
        if "done@" in w[3] and (w[4], w[0], w[2]) in starts:
            ran.setdefault(w[4], []).append((starts[(w[4], w[0], w[2])], float(w[3].split("@")[1])))
    skipped = [
        row
        for row in run_rows(postgres_url, "brisk")
        if (row["status"], row["reason"]) == (RunStatus.SKIPPED, Reason.OVERLAP)
    ]
    behind_nothing = [
        row["period"]
        for row in skipped
        if not any(a <= row["period"].timestamp() <= b for a, b in ran.get("brisk", []))
    ]
    assert behind_nothing == [], f"periods skipped behind nothing running: {behind_nothing}"


def _brisk_ran_since(log: Path, instant: float) -> bool:
    """Whether a brisk body of a period due at `instant` or later has ended."""
    lines = log.read_text().splitlines() if log.exists() else []
    return any(
        words[-1] == "brisk"
        and words[3].startswith("done@")
        and datetime.fromisoformat(words[0]).timestamp() >= instant
        for words in map(str.split, lines)
        if len(words) >= 5
    )
