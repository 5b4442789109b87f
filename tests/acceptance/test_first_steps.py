"""What a new user meets first (issue 45's rough edges), with real commands on SQLite:
`run --migrate` says it created the schema and each job's next period; a job is named
by its short name when that is unique; `@job` bare is refused in one line; and a job
run by hand from a shell (`trigger`) is not left registered as one of the fleet's."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.processes import REPOSITORY, SCHEDULER, Node, environment

pytestmark = pytest.mark.slow

MODULES = {
    "tasks.py": """
from scheduler import job


@job(cron="* * * * * *")
def send_reminders(ctx):
    if ctx.once("first-reminder"):
        raise RuntimeError("the first reminder fails")


@job(cron="0 * * * *")
def report(ctx):
    pass
""",
    "other.py": """
from scheduler import job


@job(cron="0 3 * * *")
def report(ctx):
    pass


@job(cron="0 4 * * *")
def cleanup(ctx):
    print("cleaned up", flush=True)
""",
    "bare.py": """
from scheduler import job


@job
def nightly(ctx):
    pass
""",
}


@pytest.fixture
def app(tmp_path: Path) -> Path:
    folder = tmp_path / "app"
    folder.mkdir()
    for name, text in MODULES.items():
        (folder / name).write_text(text)
    return folder


def _env(app: Path) -> dict[str, str]:
    return environment(
        PYTHONPATH=f"{app}:{REPOSITORY}", SCHEDULER_DATABASE_URL=f"sqlite:///{app / 'db.sqlite'}"
    )


def _command(app: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCHEDULER, *args],
        cwd=app,
        env=_env(app),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def node(app: Path) -> Iterator[Node]:
    """`scheduler run --migrate` on a database that does not exist yet, running `tasks`."""
    log = app / "node.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [SCHEDULER, "run", "--migrate", "--jobs", "tasks", "--log-format", "json"],
            cwd=app,
            env=_env(app),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    started = Node("fleet", process, log)
    started.wait_for(lambda event: event.get("event") == "node_started")
    yield started
    assert started.stop() == 0


def test_run_migrate_says_what_it_did_and_when_each_job_is_next_due(node: Node) -> None:
    events = node.events()
    (migrated,) = [event for event in events if event["event"] == "schema_migrated"]
    heads = sorted(path.name[:4] for path in (REPOSITORY / "migrations" / "versions").glob("0*.py"))
    assert migrated["before"] is None, "there was no schema: it was created"
    assert migrated["after"] == heads[-1]
    registered = {event["job"]: event for event in events if event["event"] == "job_registered"}
    assert set(registered) == {"tasks.send_reminders", "tasks.report"}
    now = datetime.now(UTC)
    soon = datetime.fromisoformat(registered["tasks.send_reminders"]["next_period"])
    assert now - timedelta(seconds=30) < soon <= now + timedelta(seconds=1)
    hourly = datetime.fromisoformat(registered["tasks.report"]["next_period"])
    assert (hourly.minute, hourly.second) == (0, 0)
    assert now < hourly <= now + timedelta(hours=1)


def test_commands_take_a_jobs_short_name_when_it_is_unique(node: Node, app: Path) -> None:
    # From a fixed instant: two commands a second apart would plan a per-second job's
    # periods from two different nows.
    after = ("--after", "2026-01-01T00:00:00Z", "--count", "2")
    short = _command(app, "plan", "send_reminders", "--jobs", "tasks", *after)
    full = _command(app, "plan", "tasks.send_reminders", "--jobs", "tasks", *after)
    assert short.returncode == 0, short.stderr
    assert short.stdout == full.stdout
    both = _command(app, "plan", "report", "--jobs", "tasks,other")
    assert both.returncode == 2
    assert both.stdout == ""
    assert both.stderr == (
        "error: job 'report': name: 2 jobs end so; give one's full name: other.report,"
        " tasks.report\n"
    )
    # The database's commands resolve it among the jobs the fleet registered.
    paused = _command(app, "pause", "send_reminders")
    assert (paused.returncode, paused.stdout) == (0, "tasks.send_reminders: paused\n")
    resumed = _command(app, "resume", "send_reminders")
    assert (resumed.returncode, resumed.stdout) == (0, "tasks.send_reminders: resumed\n")
    unknown = _command(app, "pause", "nothing")
    assert unknown.returncode == 2
    assert unknown.stderr.count("\n") == 1
    assert "job 'nothing': name: unknown to this database" in unknown.stderr


def _json(app: Path, *args: str) -> Any:
    done = _command(app, *args, "--json")
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def test_the_commands_that_read_history_take_a_short_name_too(node: Node, app: Path) -> None:
    """`runs --job`, `runs show JOB PERIOD`, `events`, `items` (and `items done|release`)
    and `check --job` resolve a short name as `pause` does: the first reminder failed
    (an event) and recorded an item, all under `tasks.send_reminders`."""
    full = "tasks.send_reminders"
    node.wait_for(lambda event: event.get("event") == "run_succeeded")
    runs = _json(app, "runs", "--job", "send_reminders")
    assert runs, "the job's runs, not an empty table"
    assert {run["job"] for run in runs} == {full}
    shown = _json(app, "runs", "show", "send_reminders", runs[-1]["period"])
    assert (shown["run"]["job"], shown["run"]["id"]) == (full, runs[-1]["id"])
    events = _json(app, "events", "send_reminders")
    assert "failed" in {event["kind"] for event in events}
    assert {event["job"] for event in events} == {full}
    (item,) = _json(app, "items", "send_reminders")
    assert (item["job"], item["key"], item["state"]) == (full, "first-reminder", "done")
    done = _command(app, "items", "done", "send_reminders", "first-reminder")
    assert done.stdout == f"'first-reminder' of job '{full}' is already done\n", done.stderr
    checked = _json(app, "check", "--job", "send_reminders")
    assert checked["jobs"] == 1
    assert {finding["job"] for finding in checked["findings"]} <= {full}
    # A job's exact name still reads a job no node registered (run from a shell).
    triggered = _command(app, "trigger", "cleanup", "--jobs", "other")
    assert triggered.returncode == 0, triggered.stderr
    assert {run["job"] for run in _json(app, "runs", "--job", "other.cleanup")} == {"other.cleanup"}
    # A name nothing answers to is refused in one line, by each of them.
    for args in (
        ["runs", "--job", "nothing"],
        ["runs", "show", "nothing", runs[-1]["period"]],
        ["events", "nothing"],
        ["items", "nothing"],
        ["items", "release", "nothing", "first-reminder"],
    ):
        refused = _command(app, *args)
        assert refused.returncode == 2, args
        assert refused.stderr == (
            "error: job 'nothing': name: unknown to this database (no job registered by "
            "this name or ending so, and no run of it)\n"
        ), args
    unchecked = _command(app, "check", "--job", "nothing")
    assert unchecked.returncode == 2
    assert unchecked.stderr == "error: --job: no job named 'nothing' has been registered\n"
    # Once `run-once` registered `other.report` beside `tasks.report`, `report` is
    # ambiguous: refused in one line naming both.
    once = _command(app, "run-once", "other.report", "--jobs", "other")
    assert once.returncode == 0, once.stderr
    ambiguous = (
        "error: job 'report': name: 2 jobs end so; give one's full name: other.report,"
        " tasks.report\n"
    )
    for args in (
        ["runs", "--job", "report"],
        ["events", "report"],
        ["items", "report"],
        ["check", "--job", "report"],
    ):
        refused = _command(app, *args)
        assert (refused.returncode, refused.stderr) == (2, ambiguous), args


def test_a_bare_job_decorator_is_refused_in_one_line(app: Path) -> None:
    refused = _command(app, "plan", "nightly", "--jobs", "bare")
    assert refused.returncode == 2
    assert refused.stderr == (
        "error: job 'bare.nightly': cron: @job needs cron=…:"
        ' write @job(cron="0 9 * * *") (cron=None: a template)\n'
    )


def test_a_job_triggered_from_a_shell_is_not_made_a_fleet_job(node: Node, app: Path) -> None:
    triggered = _command(app, "trigger", "cleanup", "--jobs", "other", "--log-format", "json")
    assert triggered.returncode == 0, triggered.stdout + triggered.stderr
    assert "cleaned up" in triggered.stdout
    runs = _command(app, "runs", "--json")
    assert runs.returncode == 0, runs.stderr
    assert "other.cleanup" in {run["job"] for run in json.loads(runs.stdout)}
    listed = _command(app, "jobs", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {job["name"] for job in json.loads(listed.stdout)} == {
        "tasks.send_reminders",
        "tasks.report",
    }
    time.sleep(1)
    checked = _command(app, "check")
    assert "other.cleanup" not in checked.stdout + checked.stderr


def test_a_terminal_line_is_short_and_its_run_id_finds_the_run(node: Node, app: Path) -> None:
    """`trigger` on a terminal's format: the run's line is short, and the 8 characters of
    its run id that it shows are enough for `scheduler runs show`."""
    triggered = _command(app, "trigger", "cleanup", "--jobs", "other", "--log-format", "console")
    assert triggered.returncode == 0, triggered.stdout + triggered.stderr
    (line,) = [text for text in triggered.stdout.splitlines() if " run_succeeded " in text]
    fields = line.split()
    assert fields[1:4] == ["info", "run_succeeded", "other.cleanup"]
    assert fields[4].endswith("Z"), "the period, in UTC"
    short = fields[5]
    assert len(short) == 8
    assert len(line) < 160, line
    shown = _command(app, "runs", "show", short, "--json")
    assert shown.returncode == 0, shown.stderr
    record = json.loads(shown.stdout)["run"]
    assert record["id"].startswith(short)
    assert record["job"] == "other.cleanup"
    unknown = _command(app, "runs", "show", "0000000")
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("error: no run with id '0000000'")
