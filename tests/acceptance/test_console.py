"""The web console of real `scheduler run --http` and `scheduler console` processes over
real HTTP: who may act, what is escaped, and requests carried out by exactly one node."""

from __future__ import annotations

import re
import signal
import subprocess
import time
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from scheduler.store.database import open_database
from tests.acceptance.console_client import Answer, Console
from tests.acceptance.processes import (
    SCHEDULER,
    Node,
    environment,
    other_threads,
    signal_thread,
    start_node,
)
from tests.acceptance.records import run_rows

pytestmark = pytest.mark.slow
AUTH = "alice:s3cret,deploybot:tok-123"
PAYLOAD = "<script>alert(1)</script>"
XSS_JOB = "charge<b>cards</b>"


def _query(database_url: str, sql: str, params: dict[str, Any] | None = None) -> Any:
    """The one value of the one row `sql` reads."""
    database = open_database(database_url)
    try:
        with database.transaction() as connection:
            return connection.execute(sql, params).one()[0]
    finally:
        database.dispose()


def paused(database_url: str, job: str) -> bool:
    return bool(
        _query(database_url, "SELECT paused FROM scheduler_jobs WHERE name = :job", {"job": job})
    )


def request_count(database_url: str) -> int:
    return int(_query(database_url, "SELECT count(*) FROM scheduler_requests"))


def wait_for(condition: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what} within {timeout}s"
        time.sleep(0.2)


def succeeded(database_url: str, job: str, count: int) -> list[dict[str, Any]]:
    rows = [row for row in run_rows(database_url, job) if row["status"] == "succeeded"]
    return rows if len(rows) == count else []


def succeeded_once(database_url: str, job: str) -> dict[str, Any]:
    rows: list[dict[str, Any]] = wait_for(
        lambda: [row for row in run_rows(database_url, job) if row["status"] == "succeeded"],
        timeout=15,
        what=f"a success of {job}",
    )
    return rows[0]


def request_page(console: Console, answer: Answer) -> str:
    assert answer.status == 303, answer.body
    assert answer.location is not None
    return answer.location.split(f":{console.port}", 1)[-1]


def finished(console: Console, path: str) -> Answer:
    """The request's page once a node wrote its outcome."""
    page: Answer = wait_for(
        lambda: (page := console.get(path)).body.count('class="state-pending"') == 0 and page,
        timeout=20,
        what=f"an outcome on {path}",
    )
    return page


def test_actions_need_credentials_and_a_form_token_and_are_logged(
    tmp_path: Path, database_url: str
) -> None:
    node = start_node(
        tmp_path,
        "web",
        database_url,
        "console",
        ["--http", "127.0.0.1:0"],
        SCHEDULER_CONSOLE_AUTH=AUTH,
    )
    try:
        anonymous = Console.of(node)
        overview = anonymous.get("/")
        assert overview.status == 200
        policy = overview.headers["Content-Security-Policy"]
        assert "script-src 'self'" in policy
        assert "default-src 'none'" in policy
        assert overview.headers["X-Frame-Options"] == "DENY"
        assert "sign in to act" in overview.body

        denied = anonymous.post("/actions/pause", {"job": "heartbeat"})
        assert denied.status == 401
        assert denied.headers["WWW-Authenticate"].startswith("Basic ")
        wrong = anonymous.as_user("alice", "guess").post("/actions/pause", {"job": "heartbeat"})
        assert wrong.status == 401
        form = anonymous.post("/actions/pause", {"job": "heartbeat", "form_token": ""})
        assert form.status == 403, "a browser's form is told to sign in, not challenged"
        assert "Sign in to act" in form.body
        alice = anonymous.as_user("alice", "s3cret")
        assert anonymous.get("/login").status == 401, "the sign-in link asks for basic auth"
        signed_in = alice.get("/login?next=/jobs/heartbeat")
        assert (signed_in.status, signed_in.location) == (303, "/jobs/heartbeat")
        assert alice.get("/login?next=https://evil.example/").location == "/", "stays here"
        page = alice.get("/jobs/heartbeat")
        assert "signed in as <b>alice</b>" in page.body
        assert alice.post("/actions/pause", {"job": "heartbeat"}).status == 403, "no form token"
        forged = alice.post(
            "/actions/pause",
            {"job": "heartbeat", "form_token": page.token},
            Origin="http://evil.example",
        )
        assert forged.status == 403, "posted from another site"
        cross = alice.post(
            "/actions/pause",
            {"job": "heartbeat", "form_token": page.token},
            Sec_Fetch_Site="cross-site",
        )
        assert cross.status == 403
        assert not paused(database_url, "heartbeat"), "nothing refused changed anything"

        done = alice.post("/actions/pause", {"job": "heartbeat", "form_token": page.token})
        assert done.status == 303
        assert done.location is not None
        assert done.location.endswith("/jobs/heartbeat?notice=paused")
        assert paused(database_url, "heartbeat")
        assert "Paused: its periods" in alice.get("/jobs/heartbeat?notice=paused").body
        resumed = anonymous.with_token("tok-123").post("/actions/resume", {"job": "heartbeat"})
        assert resumed.status == 303, "a script's bearer token needs no form token"
        assert not paused(database_url, "heartbeat")

        # Bad input: one line on the page, nothing written.
        bad = alice.post(
            "/actions/rerun", {"job": "heartbeat", "period": "yesterday", "form_token": page.token}
        )
        assert bad.status == 400
        assert "PERIOD: cannot read &#39;yesterday&#39;" in bad.body
        unknown = alice.post("/actions/trigger", {"job": "nope", "form_token": page.token})
        assert unknown.status == 400
        assert "unknown to this database" in unknown.body
        assert request_count(database_url) == 0

        # Markup in a job name, an error message and a traceback stays text.
        failed = wait_for(
            lambda: [row for row in run_rows(database_url, XSS_JOB) if row["status"] == "failed"],
            timeout=15,
            what="a failed period",
        )
        job_page = anonymous.get("/jobs/charge%3Cb%3Ecards%3C/b%3E")
        assert "charge&lt;b&gt;cards&lt;/b&gt;" in job_page.body
        assert XSS_JOB not in job_page.body
        run_page = anonymous.get(f"/runs/{failed[0]['id']}")
        assert "payment refused: &lt;script&gt;alert(1)&lt;/script&gt;" in run_page.body
        assert PAYLOAD not in run_page.body
        assert "raise RuntimeError(f&#34;payment refused: {PAYLOAD}&#34;)" in run_page.body
    finally:
        assert node.stop() == 0
    events = node.events()
    actions = [event for event in events if event["event"] == "console_action"]
    assert [(e["actor"], e["action"], e["outcome"]) for e in actions] == [
        ("alice", "pause", "done"),
        ("deploybot", "resume", "done"),
        ("alice", "rerun", "refused"),
        ("alice", "trigger", "refused"),
    ]
    reasons = [e["reason"] for e in events if e["event"] == "console_action_denied"]
    assert reasons == [
        "no credentials",
        "no credentials",
        "no credentials",
        "form token or origin",
        "form token or origin",
        "form token or origin",
    ]


def test_without_credentials_the_console_is_read_only(tmp_path: Path, sqlite_url: str) -> None:
    node = start_node(tmp_path, "reader", sqlite_url, "console", ["--http", "127.0.0.1:0"])
    try:
        console = Console.of(node)
        assert "read-only" in console.get("/").body
        for token in ("anything", ""):
            refused = console.with_token(token).post("/actions/pause", {"job": "heartbeat"})
            assert refused.status == 403
            assert "no credentials are configured" in refused.body
        assert console.get("/login").status == 403
        assert not paused(sqlite_url, "heartbeat")
    finally:
        assert node.stop() == 0


def test_trigger_backfill_and_rerun_are_carried_out_once_by_a_running_node(
    tmp_path: Path, postgres_url: str
) -> None:
    nodes = [
        start_node(
            tmp_path,
            name,
            postgres_url,
            "console,ledger",
            ["--http", "127.0.0.1:0"],
            SCHEDULER_CONSOLE_AUTH=AUTH,
            EXECUTION_LOG=str(tmp_path / "evidence.log"),
        )
        for name in ("one", "two")
    ]
    try:
        console = Console.of(nodes[0]).with_token("tok-123")
        Console.of(nodes[1])
        path = request_page(console, console.post("/actions/trigger", {"job": "heartbeat"}))
        page = finished(console, path)
        assert 'class="state-done"' in page.body
        assert "manual run claimed" in page.body
        manual = wait_for(
            lambda: [
                row
                for row in run_rows(postgres_url, "heartbeat")
                if row["origin"] == "manual" and row["status"] == "succeeded"
            ],
            timeout=15,
            what="the manual run to succeed",
        )
        assert len(manual) == 1
        assert manual[0]["id"] in page.body
        # `done` is the request's; the page says how its run goes (it may still run).
        assert "done; its run: " in page.body
        assert "done; its run: succeeded" in console.get(path).body
        assert "done; its run: succeeded" in console.get("/requests").body

        hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
        start, end = (
            (hour - timedelta(hours=3)).isoformat(),
            (hour - timedelta(hours=1)).isoformat(),
        )
        query = urllib.parse.urlencode({"job": "hourly-ledger", "from": start, "to": end})
        preview = console.get(f"/backfill?{query}")
        assert preview.status == 200
        assert preview.body.count('class="a-run"') == 3
        assert run_rows(postgres_url, "hourly-ledger") == [], "a preview writes nothing"
        answer = console.post(
            "/actions/backfill", {"job": "hourly-ledger", "from": start, "to": end}
        )
        page = finished(console, request_page(console, answer))
        assert "3 of 3 periods claimed, 0 kept" in page.body
        rows = wait_for(
            lambda: succeeded(postgres_url, "hourly-ledger", 3),
            timeout=15,
            what="three backfilled periods succeeded",
        )
        assert {row["origin"] for row in rows} == {"backfill"}

        period = rows[0]["period"].isoformat()
        refused = console.post("/actions/rerun", {"job": "hourly-ledger", "period": period})
        assert refused.status == 400
        assert "succeeded; add --force to run it again" in refused.body
        forced = console.post(
            "/actions/rerun", {"job": "hourly-ledger", "period": period, "force": "1"}
        )
        page = finished(console, request_page(console, forced))
        assert "attempt 2 of" in page.body
        wait_for(
            lambda: any(
                row["attempt"] == 2 and row["status"] == "succeeded"
                for row in run_rows(postgres_url, "hourly-ledger")
            ),
            timeout=15,
            what="the rerun to succeed as attempt 2",
        )
    finally:
        for node in nodes:
            assert node.stop() == 0
    done = [
        event["request_id"]
        for node in nodes
        for event in node.events()
        if event["event"] == "request_done"
    ]
    assert len(done) == len(set(done)) == 3, "each request carried out by one node only"
    requested_by = {
        event["requested_by"]
        for node in nodes
        for event in node.events()
        if event["event"] == "request_done"
    }
    assert requested_by == {"deploybot"}
    evidence = (tmp_path / "evidence.log").read_text().splitlines()
    assert len(evidence) == 4, "three backfilled periods and one rerun, each run once"


def start_console(cwd: Path, database_url: str, **env: str) -> Node:
    log_path = cwd / "console.log"
    with log_path.open("wb") as out:
        process = subprocess.Popen(
            [
                SCHEDULER,
                "console",
                "--database-url",
                database_url,
                "--http",
                "127.0.0.1:0",
                "--log-format",
                "json",
            ],
            cwd=cwd,
            env=environment(**env),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return Node("console", process, log_path)


def test_the_standalone_console_works_while_every_node_is_down(
    tmp_path: Path, postgres_url: str
) -> None:
    # A password the trust-authenticated test server ignores, and the page must not show.
    url = postgres_url.replace("postgres@", "postgres:hunter2@")
    first = start_node(tmp_path, "first", url, "console")
    first.wait_for(lambda event: event.get("event") == "run_succeeded", timeout=20)
    assert first.stop() == 0
    console_process = start_console(tmp_path, url, SCHEDULER_CONSOLE_AUTH=AUTH)
    later: Node | None = None
    try:
        console = Console.of(console_process).with_token("tok-123")
        overview = console.get("/")
        assert "no node is alive" in overview.body
        assert "heartbeat" in overview.body
        assert "hunter2" not in overview.body
        assert "postgres:***@" in overview.body
        assert console.get("/readyz").status == 200
        path = request_page(console, console.post("/actions/trigger", {"job": "heartbeat"}))
        waiting = console.get(path)
        assert "waiting for a node: no node is alive" in waiting.body
        assert "/requests" in console.get("/").body, "the header counts the waiting request"

        later = start_node(tmp_path, "later", url, "console")
        page = finished(console, path)
        assert "manual run claimed" in page.body
    finally:
        if later is not None:
            assert later.stop() == 0
        console_process.stop()
    assert any(event["event"] == "http_listening" for event in console_process.events())


def test_a_stuck_item_is_listed_first_and_marked_done_and_the_nodes_page_shows_what_runs(
    tmp_path: Path, sqlite_url: str
) -> None:
    node = start_node(
        tmp_path,
        "worker",
        sqlite_url,
        "console,sleeper",
        ["--http", "127.0.0.1:0"],
        SCHEDULER_CONSOLE_AUTH=AUTH,
        EXECUTION_LOG=str(tmp_path / "evidence.log"),
        SLEEP_SECONDS="30",
    )
    try:
        console = Console.of(node).with_token("tok-123")
        # The page may be read between the sleeper's claim and its start (a few ms on
        # SQLite): it shows `(claimed)` then, and `(running)` from the next read on.
        running = re.compile(r">sleeper [^<]*</a> \(running\)")
        nodes = wait_for(
            lambda: running.search((page := console.get("/nodes")).body) and page,
            timeout=15,
            what="the sleeper running on the nodes page",
        )
        assert '<span class="badge alive">alive</span>' in nodes.body

        path = request_page(console, console.post("/actions/trigger", {"job": "mailer"}))
        assert "manual run claimed" in finished(console, path).body
        job_page = wait_for(
            lambda: 'class="stuck"' in (page := console.get("/jobs/mailer")).body and page,
            timeout=15,
            what="the stuck item on the job page",
        )
        assert "email:&lt;b&gt;42&lt;/b&gt;" in job_page.body
        assert "1 stuck" in job_page.body
        done = console.post("/actions/done", {"job": "mailer", "key": "email:<b>42</b>"})
        assert done.status == 303
        after = console.get("/jobs/mailer?notice=done")
        assert "Marked done" in after.body
        assert 'class="stuck"' not in after.body
        again = console.post("/actions/release", {"job": "mailer", "key": "email:nope"})
        assert again.status == 400
        assert "key &#39;email:nope&#39;: no such item" in again.body
    finally:
        node.kill()


def test_malformed_credentials_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    database = tmp_path / "never.db"
    for command in (
        ["run", "--migrate", "--jobs", "tests.acceptance.jobmods.console", "--http", "127.0.0.1:0"],
        ["console", "--http", "127.0.0.1:0"],
    ):
        result = subprocess.run(
            [SCHEDULER, *command, "--database-url", f"sqlite:///{database}"],
            cwd=tmp_path,
            env=environment(SCHEDULER_CONSOLE_AUTH="alice"),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 2, result.stderr
        assert result.stderr == (
            "error: SCHEDULER_CONSOLE_AUTH: expected NAME:SECRET pairs, got an entry 'alice'\n"
        )
        assert not database.exists()


def test_the_console_stops_on_a_signal_another_thread_took(tmp_path: Path, sqlite_url: str) -> None:
    """The console's main thread only waits for its stop, and its HTTP server has threads
    of its own: a SIGTERM the kernel gives one of them must still stop it."""
    first = start_node(tmp_path, "first", sqlite_url, "console")  # a migrated database
    first.wait_for(lambda event: event.get("event") == "node_started")
    assert first.stop() == 0
    console = start_console(tmp_path, sqlite_url)
    console.wait_for(lambda event: event.get("event") == "http_listening")
    pid = console.process.pid
    try:
        signal_thread(pid, other_threads(pid)[0], signal.SIGTERM)
        assert console.process.wait(timeout=15) == 0
    finally:
        console.kill()
    assert any(event["event"] == "signal_received" for event in console.events())
