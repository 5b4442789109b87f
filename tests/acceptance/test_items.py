"""Items and checkpoints with real `scheduler` processes: SIGKILL mid-way, a forced re-run,
two `run-once` copies at once, a resumed checkpoint, and retention."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from scheduler.states import RunStatus
from scheduler.store.database import open_database
from tests.acceptance.jobmods.resumable import STEPS
from tests.acceptance.processes import SCHEDULER, environment, jobmods, run_command, start_node
from tests.acceptance.records import run_rows
from tests.integration.seed import add_run
from tests.retention_seed import seed
from tests.sql import insert

pytestmark = pytest.mark.slow
YEARLY_PERIOD = "2026-01-01T00:00:00Z"


def _run_once(
    cwd: Path, database_url: str, job: str, module: str, *extra: str, **env: str
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            SCHEDULER,
            "run-once",
            job,
            *extra,
            "--database-url",
            database_url,
            "--jobs",
            jobmods(module),
            "--log-format",
            "json",
        ],
        cwd=cwd,
        env=environment(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout}s: {what}")


def _lines(path: Path) -> list[list[str]]:
    """The evidence file: period, node, attempt, what happened (the job's name dropped)."""
    return [line.split()[:-1] for line in path.read_text().splitlines()] if path.exists() else []


def _run_row(database_url: str, job: str) -> dict[str, Any] | None:
    rows = run_rows(database_url, job)
    return rows[0] if rows else None


def _settled(database_url: str, job: str, timeout: float) -> dict[str, Any]:
    def succeeded() -> dict[str, Any] | None:
        row = _run_row(database_url, job)
        return row if row and row["status"] == RunStatus.SUCCEEDED else None

    found: dict[str, Any] = _wait(succeeded, timeout, f"{job} succeeded")
    return found


def _run_ids(database_url: str) -> set[str]:
    database = open_database(database_url)
    try:
        with database.transaction() as connection:
            return set(connection.execute("SELECT id FROM scheduler_runs").scalars())
    finally:
        database.dispose()


def _scheduler_json(cwd: Path, database_url: str, *args: str) -> Any:
    result = run_command([*args, "--database-url", database_url, "--json"], cwd)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_thousand_items_survive_a_sigkill_and_a_forced_rerun(
    tmp_path: Path, postgres_url: str
) -> None:
    log, emails = tmp_path / "executions.txt", tmp_path / "emails.txt"
    app_url = postgres_url.replace("postgresql://", "postgresql+psycopg://", 1)
    env = {
        "EXECUTION_LOG": str(log),
        "EMAILS_FILE": str(emails),
        "APP_DATABASE_URL": app_url,
        "HANG_AT": "0300",
        "FAIL_ON_ATTEMPT": "2",
    }
    first = _run_once(
        tmp_path, postgres_url, "bill-customers", "billing", "--period", YEARLY_PERIOD, **env
    )
    try:
        _wait(lambda: any("sending" in line for line in _lines(log)), 20, "customer 0300 reached")
    finally:
        first.kill()
        first.communicate(timeout=10)
    # Attempt 1 is dead inside customer 0300's invoice transaction, its email claimed.
    rescuer = start_node(tmp_path, "rescuer", postgres_url, "billing", **env)
    try:
        row = _settled(postgres_url, "bill-customers", 45)
    finally:
        assert rescuer.stop() == 0
    # Attempt 2 took over after the lease expired and failed at the end (forced);
    # attempt 3 went over all 1,000 customers again.
    assert row["attempt"] == 3
    assert [words[2:] for words in _lines(log) if words[3] in ("start", "end")] == [
        ["1", "start"],
        ["2", "start"],
        ["2", "end"],
        ["3", "start"],
        ["3", "end"],
    ]

    engine = create_engine(app_url)
    try:
        with engine.connect() as connection:
            invoiced: Counter[str] = Counter(
                dict(
                    connection.execute(
                        text("SELECT customer, count(*) FROM test_invoices GROUP BY customer")
                    ).all()
                )
            )
            invoicing_attempts: Counter[int] = Counter(
                dict(
                    connection.execute(
                        text("SELECT attempt, count(*) FROM test_invoices GROUP BY attempt")
                    ).all()
                )
            )
    finally:
        engine.dispose()
    # Exactly once in the database: the killed transaction took its item record with it.
    assert len(invoiced) == 1000
    assert set(invoiced.values()) == {1}
    assert invoicing_attempts[1] == 300
    assert invoicing_attempts[2] == 700
    assert invoicing_attempts[3] == 0
    # At most once outside it: 0300's email may or may not have gone, so it is never redone.
    sent = Counter(line.split()[0] for line in emails.read_text().splitlines())
    assert set(sent.values()) == {1}
    assert sorted(sent) == [f"{n:04d}" for n in range(1000) if n != 300]

    stuck = _scheduler_json(tmp_path, postgres_url, "items", "bill-customers", "--stuck")
    assert [(item["key"], item["state"], item["attempt"]) for item in stuck] == [
        ("email:0300", "claimed", 1)
    ]
    database = open_database(postgres_url)
    try:
        with database.transaction() as connection:
            states = Counter(
                connection.execute(
                    "SELECT state FROM scheduler_items WHERE job = :job", {"job": "bill-customers"}
                ).scalars()
            )
    finally:
        database.dispose()
    assert states == {"done": 1999, "claimed": 1}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_two_run_once_copies_on_a_thousand_items(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    database_url: str = request.getfixturevalue(f"{backend}_url")
    log, emails = tmp_path / "executions.txt", tmp_path / "emails.txt"
    env = {"EXECUTION_LOG": str(log), "EMAILS_FILE": str(emails)}
    began = time.monotonic()
    copies = [
        _run_once(tmp_path, database_url, "mail-customers", "billing", **env) for _ in range(2)
    ]
    outcomes: list[tuple[int, float, str]] = [(0, 0.0, "")] * 2

    def collect(index: int) -> None:
        out, _ = copies[index].communicate(timeout=60)
        outcomes[index] = (copies[index].returncode, time.monotonic() - began, out)

    waiters = [threading.Thread(target=collect, args=(n,)) for n in range(2)]
    for waiter in waiters:
        waiter.start()
    for waiter in waiters:
        waiter.join()
    assert [code for code, _, _ in outcomes] == [0, 0], outcomes
    losers = [(took, out) for _, took, out in outcomes if '"run_already_claimed"' in out]
    assert len(losers) == 1, outcomes
    assert losers[0][0] < 5
    assert '"run_started"' not in losers[0][1]
    assert [words[3] for words in _lines(log)] == ["start", "end"]
    sent = Counter(line.split()[0] for line in emails.read_text().splitlines())
    assert sorted(sent) == [f"{n:04d}" for n in range(1000)]
    assert set(sent.values()) == {1}


def test_a_long_job_killed_after_a_checkpoint_resumes_from_it(
    tmp_path: Path, postgres_url: str
) -> None:
    log = tmp_path / "executions.txt"
    env = {"EXECUTION_LOG": str(log), "STEP_SECONDS": "0.3"}
    first = _run_once(
        tmp_path, postgres_url, "long-report", "resumable", "--period", YEARLY_PERIOD, **env
    )
    try:
        _wait(lambda: ["checkpointed", "5"] in [w[3:] for w in _lines(log)], 20, "5 steps")
    finally:
        first.kill()
        first.communicate(timeout=10)
    rescuer = start_node(tmp_path, "rescuer", postgres_url, "resumable", **env)
    try:
        row = _settled(postgres_url, "long-report", 30)
    finally:
        assert rescuer.stop() == 0
    assert row["attempt"] == 2
    first_steps = [int(w[4]) for w in _lines(log) if w[2] == "1" and w[3] == "step"]
    (resumed,) = [int(w[4]) for w in _lines(log) if w[2] == "2" and w[3] == "resumed-from"]
    second_steps = [int(w[4]) for w in _lines(log) if w[2] == "2" and w[3] == "step"]
    assert first_steps[:5] == [0, 1, 2, 3, 4]
    # It resumes where the last checkpoint points (5 or later: the test saw that one);
    # at most the one step that was in flight when the process died is done again.
    assert 5 <= resumed <= max(first_steps) + 1
    assert second_steps == list(range(resumed, STEPS))
    assert json.loads(row["checkpoint"]) == {"next": STEPS}


def test_a_job_in_a_child_process_uses_items_and_checkpoints(
    tmp_path: Path, sqlite_url: str
) -> None:
    log = tmp_path / "executions.txt"
    result = run_command(
        [
            "run-once",
            "isolated-items",
            "--period",
            YEARLY_PERIOD,
            "--database-url",
            sqlite_url,
            "--jobs",
            jobmods("resumable"),
            "--log-format",
            "json",
        ],
        tmp_path,
        EXECUTION_LOG=str(log),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert [" ".join(words[2:]) for words in _lines(log)] == [
        "1 resumed-from None",
        "1 claimed a,b,c",
        "2 resumed-from {'attempt': 1, 'claimed': ['a', 'b', 'c']}",
        "2 claimed -",
    ]


def test_the_daemon_prunes_old_history_when_retention_is_set(
    tmp_path: Path, sqlite_url: str
) -> None:
    database = open_database(sqlite_url)
    try:
        seeded = seed(database)
    finally:
        database.dispose()
    node = start_node(
        tmp_path,
        "pruner",
        sqlite_url,
        "daily",
        ["--retention", "90d"],
        EXECUTION_LOG=str(tmp_path / "x.txt"),
    )
    try:
        event = node.wait_for(lambda event: event.get("event") == "history_pruned", timeout=15)
    finally:
        assert node.stop() == 0
    assert (event["runs"], event["items"], event["stuck_items_kept"]) == (
        len(seeded.doomed_runs),
        len(seeded.doomed_items),
        1,
    )
    assert _run_ids(sqlite_url) == seeded.kept_runs
    assert {item["key"] for item in _scheduler_json(tmp_path, sqlite_url, "items", "billing")} == (
        seeded.kept_items
    )


def test_operators_list_settle_and_prune_from_the_command_line(
    tmp_path: Path, sqlite_url: str
) -> None:
    database = open_database(sqlite_url)
    try:
        seeded = seed(database)
        # A claimed item whose run is still running is in progress, not stuck.
        busy = add_run(database, "billing", database.read_clock().replace(microsecond=0), "running")
        with database.transaction() as connection:
            insert(
                connection,
                "scheduler_items",
                job="billing",
                key="busy",
                state="claimed",
                period=database.read_clock(),
                run_id=busy,
                attempt=1,
                node="node-a",
                claimed_at=database.read_clock(),
            )
    finally:
        database.dispose()

    listed = _scheduler_json(tmp_path, sqlite_url, "items", "billing")
    assert {item["key"]: item["stuck"] for item in listed} == {
        "busy": False,
        "recent-done": False,
        "old-done-1": False,
        "old-done-2": False,
        "old-done-3": False,
        "old-stuck": True,
    }
    stuck = _scheduler_json(tmp_path, sqlite_url, "items", "billing", "--stuck")
    assert [item["key"] for item in stuck] == ["old-stuck"]
    table = run_command(["items", "billing", "--database-url", sqlite_url], tmp_path)
    assert table.returncode == 0
    assert table.stdout.splitlines()[0].split() == [
        "JOB",
        "KEY",
        "STATE",
        "PERIOD",
        "ATTEMPT",
        "NODE",
        "CLAIMED",
        "DONE",
    ]

    refused = run_command(
        ["items", "release", "billing", "busy", "--database-url", sqlite_url], tmp_path
    )
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        f"error: job 'billing': key 'busy': attempt 1 of run {busy} is still handling it; "
        "wait until that run ends"
    )
    missing = run_command(
        ["items", "done", "billing", "nope", "--database-url", sqlite_url], tmp_path
    )
    assert (missing.returncode, missing.stderr.strip()) == (
        2,
        "error: job 'billing': key 'nope': no such item",
    )
    nameless = run_command(["items", "--database-url", sqlite_url], tmp_path)
    assert nameless.returncode == 2
    assert "name the job" in nameless.stderr

    dry = _scheduler_json(tmp_path, sqlite_url, "prune", "--older-than", "90d", "--dry-run")
    assert (dry["dry_run"], dry["runs"], dry["items"], dry["stuck_items_kept"]) == (
        True,
        len(seeded.doomed_runs),
        len(seeded.doomed_items),
        1,
    )
    pruned = run_command(["prune", "--older-than", "90d", "--database-url", sqlite_url], tmp_path)
    assert pruned.returncode == 0, pruned.stderr
    assert pruned.stdout.startswith(
        f"deleted {len(seeded.doomed_runs)} runs (1 earlier attempts) and "
        f"{len(seeded.doomed_items)} done items from before "
    )
    assert "kept 1 items claimed before then and never done" in pruned.stdout
    after = _scheduler_json(tmp_path, sqlite_url, "items", "billing")
    assert sorted(item["key"] for item in after) == ["busy", "old-stuck", "recent-done"]
    assert _run_ids(sqlite_url) == seeded.kept_runs | {busy}

    done = run_command(
        ["items", "done", "billing", "old-stuck", "--database-url", sqlite_url], tmp_path
    )
    assert (done.returncode, done.stdout.strip()) == (0, "marked 'old-stuck' of job 'billing' done")
    released = run_command(
        ["items", "release", "billing", "old-stuck", "--database-url", sqlite_url], tmp_path
    )
    assert (released.returncode, released.stdout.strip()) == (
        0,
        "released 'old-stuck' of job 'billing' (it was done)",
    )
    assert _scheduler_json(tmp_path, sqlite_url, "items", "billing", "--stuck") == []

    for bad in ("0s", "soon"):
        refused = run_command(
            ["prune", "--older-than", bad, "--database-url", sqlite_url], tmp_path
        )
        assert refused.returncode == 2
        assert refused.stderr.startswith("error: --older-than: ")
