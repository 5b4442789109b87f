"""What people read in the log: a failure with its traceback, application logging that
names the run it came from, retries that read as retries, and a second copy that says
what ran elsewhere."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.processes import jobmods, run_command, start_node

pytestmark = pytest.mark.slow
RUN_FIELDS = {"job", "period", "run_id", "attempt", "node"}


def _trigger(
    tmp_path: Path, url: str, job: str, log_format: str = "json", **env: str
) -> tuple[int, str]:
    result = run_command(
        [
            "trigger",
            job,
            "--database-url",
            url,
            "--jobs",
            jobmods("chatty"),
            "--log-format",
            log_format,
        ],
        tmp_path,
        60,
        **env,
    )
    return result.returncode, result.stdout


def _events(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_a_failure_logs_its_traceback(tmp_path: Path, sqlite_url: str) -> None:
    code, out = _trigger(tmp_path, sqlite_url, "declined")
    assert code == 1
    final = [e for e in _events(out) if e["event"] == "run_failed" and e["level"] == "error"]
    assert len(final) == 1, out
    exception = final[0]["exception"]
    assert isinstance(exception, list), "the JSON log carries the traceback as data"
    frames = [frame["name"] for trace in exception for frame in trace["frames"]]
    assert "_charge" in frames
    assert exception[-1]["exc_type"] == "ValueError"
    assert exception[-1]["exc_value"] == "card of customer 42 declined"
    code, text = _trigger(tmp_path, sqlite_url, "declined", "console")
    assert "Traceback (most recent call last)" in text
    assert 'in _charge\n    raise ValueError(f"card of customer {customer} declined")' in text


def test_a_retried_failure_reads_as_a_retry(tmp_path: Path, sqlite_url: str) -> None:
    _, out = _trigger(tmp_path, sqlite_url, "declined")
    events = _events(out)
    failed = [e for e in events if e["event"] == "run_failed"]
    assert [(e["attempt"], e["level"]) for e in failed] == [(1, "warning"), (2, "error")]
    assert "retry_in_s" in failed[0]
    assert "retry_in_s" not in failed[1], "no retry is due: the field is not there"
    assert {e["error_type"] for e in failed} == {"ValueError"}, "no builtins. prefix"
    retaken = [e for e in events if e["event"] == "run_retaken"]
    assert [(e["attempt"], e["level"], e["cause"]) for e in retaken] == [(2, "info", "retry")]


@pytest.mark.parametrize("kind", ["thread", "timed", "async", "process"])
def test_logging_from_job_code_names_the_run(tmp_path: Path, sqlite_url: str, kind: str) -> None:
    code, out = _trigger(tmp_path, sqlite_url, f"chatty-{kind}")
    assert code == 0, out
    events = _events(out)
    (run,) = [e for e in events if e["event"] == "run_started"]
    stdlib = [e for e in events if e.get("logger") == "myapp.billing"]
    bound = [e for e in events if e["event"] == "charged"]
    assert [e["event"] for e in stdlib] == [f"charging customer 42 ({kind})"]
    assert len(bound) == 1
    for line in (*stdlib, *bound):
        assert {field: line.get(field) for field in RUN_FIELDS} == {
            field: run[field] for field in RUN_FIELDS
        }


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_what_a_job_prints_comes_between_its_start_and_its_outcome(
    tmp_path: Path, sqlite_url: str, unbuffered: str
) -> None:
    """A person reading the log sees a job's own output after its run_started line and
    before its outcome, whether stdout is unbuffered (our Docker image sets
    PYTHONUNBUFFERED: each print is written at once) or not. Whoever makes our lines wait
    to be written together (tried for the burst several times, see
    BENCHMARKS.md's git history) must keep this."""
    code, out = _trigger(tmp_path, sqlite_url, "chatty-print", PYTHONUNBUFFERED=unbuffered)
    assert code == 0, out
    said = [
        json.loads(line)["event"] if line.startswith("{") else line for line in out.splitlines()
    ]
    ours = [line for line in said if line.startswith("run_") or line.startswith("printed")]
    assert ours == ["run_claimed", "run_started", "printed by chatty-print", "run_succeeded"], out


def test_a_second_copy_says_what_ran_elsewhere(tmp_path: Path, sqlite_url: str) -> None:
    """The tutorial's first steps (docs/tutorial/first-job.md): start a second copy and
    watch each period run in only one of them. The copy that ran nothing says so, at info
    level."""
    log = tmp_path / "executions.txt"
    nodes = [
        start_node(
            tmp_path,
            f"copy{n}",
            sqlite_url,
            "ticker",
            ["--summary-interval", "3s"],
            EXECUTION_LOG=str(log),
        )
        for n in range(2)
    ]
    try:
        for node in nodes:
            node.wait_for(lambda event: event.get("event") == "node_started")
        time.sleep(8)
    finally:
        codes = [node.stop() for node in nodes]
    assert codes == [0, 0]
    summaries = {
        node.name: [e for e in node.events() if e.get("event") == "periods_elsewhere"]
        for node in nodes
    }
    ran_here = {
        node.name: [e for e in node.events() if e.get("event") == "run_succeeded"] for node in nodes
    }
    for node in nodes:
        if not ran_here[node.name]:
            assert summaries[node.name], f"{node.name} ran nothing and said nothing"
    said = [e for events in summaries.values() for e in events]
    assert said
    assert all(e["level"] == "info" and e["periods"] >= 1 for e in said)
