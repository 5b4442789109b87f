"""`scheduler schedules …` as an operator runs it, on SQLite and PostgreSQL: a round trip
of every command with `--json`, one tenant's schedules by `--prefix`, paging with
`--limit`/`--after`, a schedule's runs by `show`, and bad input refused in one line
(exit 2) with nothing written."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from scheduler.node.registration import register
from scheduler.schedules import Schedules
from scheduler.store.database import Database, open_database
from tests.acceptance.jobmods.tenants import tenant_report
from tests.acceptance.processes import jobmods, run_command, start_node
from tests.integration.seed import add_run
from tests.sql import rows

WEEKLY = "tenant-42:weekly"


@pytest.fixture
def url(database_url: str) -> str:
    """A database where a node registered the template job `tenant_report` (as `scheduler
    run --jobs tests.acceptance.jobmods.tenants` would), and schedule `tenant-42:weekly`."""
    database = open_database(database_url)
    try:
        register(database, {tenant_report.name: tenant_report})
        Schedules(database).create(
            WEEKLY,
            "tenant_report",
            cron="0 9 * * MON",
            timezone="Europe/Paris",
            args={"tenant": 42},
        )
    finally:
        database.dispose()
    return database_url


def _scheduler(tmp_path: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    result = run_command(["schedules", *args, "--database-url", url], tmp_path)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def _json(tmp_path: Path, url: str, *args: str) -> Any:
    result = _scheduler(tmp_path, url, *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _schedule_rows(url: str) -> list[dict[str, Any]]:
    database = open_database(url)
    try:
        return rows(database, "scheduler_schedules", order_by="key")
    finally:
        database.dispose()


def _keys(listing: dict[str, Any]) -> list[str]:
    return [schedule["key"] for schedule in listing["schedules"]]


def test_create_list_show_change_pause_resume_delete(tmp_path: Path, url: str) -> None:
    key = "tenant-7:hourly"
    created = _json(
        tmp_path,
        url,
        "create",
        key,
        "tenant_report",
        "--every",
        "1h",
        "--start",
        "2030-01-01T00:30:00Z",
        "--args",
        '{"tenant": 7, "note": "hourly"}',
        "--catchup",
        "latest",
        "--catchup-window",
        "2h",
        "--catchup-limit",
        "3",
    )
    assert created["key"] == key
    assert created["job"] == "tenant_report"
    assert (created["trigger"], created["every_seconds"]) == ("every", 3600)
    assert created["start"] == created["next_due"] == "2030-01-01T00:30:00Z"
    assert created["args"] == {"tenant": 7, "note": "hourly"}
    assert (created["catchup"], created["catchup_window_seconds"], created["catchup_limit"]) == (
        "latest",
        7200,
        3,
    )
    assert created["paused"] is False

    listing = _json(tmp_path, url, "list")
    assert _keys(listing) == [WEEKLY, key]
    assert listing["next_after"] is None
    shown = _json(tmp_path, url, "show", key)
    assert {name: shown[name] for name in created} == created
    assert shown["runs"] == []

    changed = _json(
        tmp_path,
        url,
        "change",
        key,
        "--cron",
        "0 6 * * *",
        "--timezone",
        "Asia/Tokyo",
        "--args",
        '{"tenant": 7}',
    )
    assert (changed["trigger"], changed["cron"], changed["timezone"]) == (
        "cron",
        "0 6 * * *",
        "Asia/Tokyo",
    )
    assert changed["args"] == {"tenant": 7}
    assert changed["catchup"] == "latest"  # not given: kept
    assert changed["version"] == created["version"] + 1
    # 06:00 in Tokyo is 21:00 UTC.
    assert changed["next_due"].endswith("T21:00:00Z")

    paused = _json(tmp_path, url, "pause", key)
    assert paused["paused"] is True
    assert _keys(_json(tmp_path, url, "list", "--paused")) == [key]
    assert _keys(_json(tmp_path, url, "list", "--active")) == [WEEKLY]
    resumed = _json(tmp_path, url, "resume", key)
    assert resumed["paused"] is False

    assert _json(tmp_path, url, "delete", key) == {"key": key, "deleted": True}
    assert _keys(_json(tmp_path, url, "list")) == [WEEKLY]
    gone = _json(tmp_path, url, "list", "--deleted")
    assert _keys(gone) == [key]
    assert gone["schedules"][0]["deleted_at"] is not None

    refused = _scheduler(tmp_path, url, "show", key, "--json")
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == f"error: schedule {key!r}: key: no such schedule\n"

    # A deleted schedule's key may be taken again.
    again = _json(tmp_path, url, "create", key, "tenant_report", "--cron", "*/5 * * * *")
    assert (again["cron"], again["args"], again["deleted_at"]) == ("*/5 * * * *", {}, None)


def test_each_change_prints_one_line(tmp_path: Path, url: str) -> None:
    def line(*args: str) -> str:
        result = _scheduler(tmp_path, url, *args)
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""
        lines = result.stdout.splitlines()
        assert len(lines) == 1, result.stdout
        return lines[0]

    key = "tenant-9:once"
    created = line("create", key, "tenant_report", "--at", "2030-06-01T12:00:00Z", "--paused")
    assert created.startswith(f"created schedule {key!r}: job tenant_report, at 2030-06-01")
    assert created.endswith(", paused")
    assert line("resume", key).endswith("next due 2030-06-01T12:00:00Z")
    assert line("pause", key).startswith(f"paused schedule {key!r}")
    assert line("change", key, "--args", '{"tenant": 9}').startswith(f"changed schedule {key!r}")
    replaced = line(
        "create", WEEKLY, "tenant_report", "--cron", "0 8 * * *", "--args", "{}", "--replace"
    )
    assert replaced.startswith(f"replaced schedule {WEEKLY!r}: job tenant_report, cron 0 8 * * *")
    assert line("delete", key) == f"deleted schedule {key!r}"

    table = _scheduler(tmp_path, url, "list").stdout.splitlines()
    assert table[0].split() == ["KEY", "JOB", "TRIGGER", "NEXT", "DUE", "STATE", "ARGS"]
    assert table[1].startswith(WEEKLY)
    assert "cron 0 8 * * * UTC" in table[1]  # --replace sets every field: UTC by default
    assert table[1].rstrip().endswith("active  {}")


def test_prefix_lists_one_tenants_schedules(tmp_path: Path, url: str) -> None:
    for key in ("tenant-42:daily", "tenant-420:daily", "tenant-43:daily", "tenant-4:daily"):
        result = _scheduler(
            tmp_path, url, "create", key, "tenant_report", "--cron", "0 3 * * *", "--args", "{}"
        )
        assert result.returncode == 0, result.stderr
    listing = _json(tmp_path, url, "list", "--prefix", "tenant-42:")
    assert _keys(listing) == ["tenant-42:daily", WEEKLY]
    assert listing["next_after"] is None
    table = _scheduler(tmp_path, url, "list", "--prefix", "tenant-42:").stdout.splitlines()
    assert [row.split()[0] for row in table[1:]] == ["tenant-42:daily", WEEKLY]
    assert _keys(_json(tmp_path, url, "list", "--prefix", "tenant-9:")) == []
    assert _scheduler(tmp_path, url, "list", "--prefix", "tenant-9:").stdout == "no schedules\n"
    assert _keys(_json(tmp_path, url, "list", "--job", "tenant_report", "--limit", "2")) == [
        "tenant-420:daily",  # code point order, as keys are compared on both backends
        "tenant-42:daily",
    ]
    assert _keys(_json(tmp_path, url, "list", "--job", "other")) == []


def test_pages_follow_one_another_with_limit_and_after(tmp_path: Path, url: str) -> None:
    database = open_database(url)
    try:
        schedules = Schedules(database)
        for tenant in range(5):
            schedules.create(
                f"tenant-5:{tenant}", "tenant_report", every="1h", args={"tenant": tenant}
            )
    finally:
        database.dispose()
    seen: list[list[str]] = []
    after: list[str] = []
    while True:
        page = _json(tmp_path, url, "list", "--prefix", "tenant-5:", "--limit", "2", *after)
        seen.append(_keys(page))
        if page["next_after"] is None:
            break
        assert page["next_after"] == seen[-1][-1]
        after = ["--after", page["next_after"]]
    assert seen == [["tenant-5:0", "tenant-5:1"], ["tenant-5:2", "tenant-5:3"], ["tenant-5:4"]]

    text = _scheduler(tmp_path, url, "list", "--prefix", "tenant-5:", "--limit", "2").stdout
    assert text.splitlines()[-1] == "next page: --after tenant-5:1"
    last = _scheduler(tmp_path, url, "list", "--prefix", "tenant-5:", "--after", "tenant-5:3")
    assert "next page" not in last.stdout
    assert [row.split()[0] for row in last.stdout.splitlines()[1:]] == ["tenant-5:4"]


def test_show_lists_the_runs_of_its_periods_newest_first(tmp_path: Path, url: str) -> None:
    database: Database = open_database(url)
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    try:
        add_run(database, f"@{WEEKLY}", hour - timedelta(hours=2), "succeeded", duration_ms=40)
        add_run(database, f"@{WEEKLY}", hour - timedelta(hours=1), "failed", error="boom")
        add_run(database, "@tenant-43:weekly", hour, "succeeded")  # another schedule's
    finally:
        database.dispose()
    shown = _json(tmp_path, url, "show", WEEKLY)
    assert [(run["job"], run["status"]) for run in shown["runs"]] == [
        (f"@{WEEKLY}", "failed"),
        (f"@{WEEKLY}", "succeeded"),
    ]
    assert shown["describe"] == "cron 0 9 * * MON Europe/Paris"
    text = _scheduler(tmp_path, url, "show", WEEKLY).stdout
    assert f"key:            {WEEKLY}" in text
    assert 'args:           {"tenant": 42}' in text
    assert f"runs of @{WEEKLY}:" in text
    assert "ValueError: boom" in text


@pytest.mark.slow
def test_show_lists_what_a_node_ran(tmp_path: Path, database_url: str) -> None:
    log = tmp_path / "executions.jsonl"
    node = start_node(tmp_path, "node0", database_url, "tenants", EXECUTION_LOG=str(log))
    try:
        node.wait_for(lambda event: event.get("event") == "node_started")
        key = "tenant-1:tick"
        every_second = ["create", key, "tenant_report", "--every", "1s", "--args", '{"tenant": 1}']
        created = _scheduler(tmp_path, database_url, *every_second)
        assert created.returncode == 0, created.stderr
        node.wait_for(
            lambda event: event.get("event") == "run_succeeded" and event.get("job") == f"@{key}",
            timeout=30,
            count=2,
        )
    finally:
        stopped = node.stop()
    assert stopped == 0
    shown = _json(tmp_path, database_url, "show", key)
    succeeded = [run for run in shown["runs"] if run["status"] == "succeeded"]
    assert len(succeeded) >= 2
    assert {run["job"] for run in shown["runs"]} == {f"@{key}"}
    periods = [run["period"] for run in shown["runs"]]
    assert periods == sorted(periods, reverse=True)
    ran = [json.loads(line) for line in log.read_text().splitlines()]
    assert {(line["schedule"], line["tenant"]) for line in ran} == {(key, 1)}


BAD_INPUT = [
    pytest.param(
        [
            "create",
            "tenant-42:new",
            "tenant_report",
            "--cron",
            "0 9 * * *",
            "--args",
            "{tenant: 1}",
        ],
        "schedule 'tenant-42:new': args: not JSON",
        id="create-args-not-json",
    ),
    pytest.param(
        ["create", "tenant-42:new", "tenant_report", "--cron", "0 9 * * *", "--args", "[42]"],
        "schedule 'tenant-42:new': args: must be a JSON object",
        id="create-args-not-an-object",
    ),
    pytest.param(
        ["create", "tenant-42:new", "tenant_report", "--cron", "0 9 * * *", "--args", '{"1x": 1}'],
        "schedule 'tenant-42:new': args: every name must be a Python identifier",
        id="create-args-not-keywords",
    ),
    pytest.param(
        [
            "create",
            "tenant-42:new",
            "tenant_report",
            "--cron",
            "0 9 * * *",
            "--timezone",
            "Mars/Base",
        ],
        "schedule 'tenant-42:new': timezone: unknown time zone 'Mars/Base'",
        id="create-unknown-zone",
    ),
    pytest.param(
        ["create", "tenant-42:new", "billing", "--cron", "0 9 * * *"],
        "schedule 'tenant-42:new': job: no node has registered a job 'billing'",
        id="create-unknown-job",
    ),
    pytest.param(
        ["create", "tenant-42:new", "tenant_report", "--cron", "0 0 30 2 *"],
        "schedule 'tenant-42:new': cron: '0 0 30 2 *' never fires",
        id="create-cron-never-fires",
    ),
    pytest.param(
        ["create", "tenant-42:new", "tenant_report", "--cron", "0 25 * * *"],
        "schedule 'tenant-42:new': cron:",
        id="create-cron-malformed",
    ),
    pytest.param(
        ["create", "tenant-42:new", "tenant_report"],
        "schedule 'tenant-42:new': trigger: give exactly one of cron, every or at",
        id="create-no-trigger",
    ),
    pytest.param(
        ["create", "tenant-42:new", "tenant_report", "--cron", "0 9 * * *", "--every", "1h"],
        "schedule 'tenant-42:new': trigger: give exactly one of cron, every or at",
        id="create-two-triggers",
    ),
    pytest.param(
        ["create", "tenant-42:new", "tenant_report", "--every", "1.5s"],
        "schedule 'tenant-42:new': every: must be whole seconds",
        id="create-every-fraction",
    ),
    pytest.param(
        ["create", "tenant-42:new", "tenant_report", "--at", "2001-01-01T00:00:00Z"],
        "schedule 'tenant-42:new': at: 2001-01-01T00:00:00+00:00 is past the catch-up window",
        id="create-at-past",
    ),
    pytest.param(
        ["create", "tenant-42:new", "tenant_report", "--at", "tomorrow"],
        "schedule 'tenant-42:new': at: cannot read 'tomorrow' as an instant",
        id="create-at-unreadable",
    ),
    pytest.param(
        ["create", "tenant-42:new", "tenant_report", "--every", "1h", "--catchup", "some"],
        "schedule 'tenant-42:new': catchup: must be one of 'all', 'latest', 'none'",
        id="create-catchup-unknown",
    ),
    pytest.param(
        ["create", "tenant-42:new", "tenant_report", "--every", "1h", "--catchup-limit", "many"],
        "schedule 'tenant-42:new': catchup_limit: must be a whole number ≥ 1, got 'many'",
        id="create-catchup-limit-not-a-number",
    ),
    pytest.param(
        ["create", "tenant-42:new", "tenant_report", "--every", "1h", "--catchup-window", "soon"],
        "schedule 'tenant-42:new': catchup_window: cannot read 'soon' as a duration",
        id="create-catchup-window-unreadable",
    ),
    pytest.param(
        ["create", WEEKLY, "tenant_report", "--cron", "0 9 * * *"],
        f"schedule {WEEKLY!r}: key: a schedule with this key exists (--replace",
        id="create-existing-key",
    ),
    pytest.param(
        ["create", WEEKLY, "tenant_report", "--cron", "0 0 31 4 *", "--replace"],
        f"schedule {WEEKLY!r}: cron: '0 0 31 4 *' never fires",
        id="replace-cron-never-fires",
    ),
    pytest.param(
        ["change", WEEKLY, "--args", "tenant=42"],
        f"schedule {WEEKLY!r}: args: not JSON",
        id="change-args-not-json",
    ),
    pytest.param(
        ["change", WEEKLY, "--timezone", "Europe/Atlantis"],
        f"schedule {WEEKLY!r}: timezone: unknown time zone 'Europe/Atlantis'",
        id="change-unknown-zone",
    ),
    pytest.param(
        ["change", WEEKLY, "--cron", "0 0 30 2 *"],
        f"schedule {WEEKLY!r}: cron: '0 0 30 2 *' never fires",
        id="change-cron-never-fires",
    ),
    pytest.param(
        ["change", WEEKLY, "--start", "2030-01-01T00:00:00Z"],
        f"schedule {WEEKLY!r}: start: give `every` with a new start",
        id="change-start-alone",
    ),
    pytest.param(
        ["change", WEEKLY],
        f"schedule {WEEKLY!r}: nothing to change",
        id="change-nothing",
    ),
    pytest.param(
        ["change", "tenant-42:gone", "--cron", "0 9 * * *"],
        "schedule 'tenant-42:gone': key: no such schedule",
        id="change-unknown-key",
    ),
    pytest.param(
        ["pause", "tenant-42:gone"],
        "schedule 'tenant-42:gone': key: no such schedule",
        id="pause-unknown-key",
    ),
    pytest.param(
        ["resume", "tenant-42:gone"],
        "schedule 'tenant-42:gone': key: no such schedule",
        id="resume-unknown-key",
    ),
    pytest.param(
        ["delete", "tenant-42:gone"],
        "schedule 'tenant-42:gone': key: no such schedule",
        id="delete-unknown-key",
    ),
    pytest.param(
        ["show", "tenant-42:gone"],
        "schedule 'tenant-42:gone': key: no such schedule",
        id="show-unknown-key",
    ),
]


@pytest.mark.parametrize(("args", "message"), BAD_INPUT)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    tmp_path: Path, url: str, args: list[str], message: str
) -> None:
    before = _schedule_rows(url)
    result = _scheduler(tmp_path, url, *args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {message}"), lines[0]
    assert _schedule_rows(url) == before


def test_trigger_and_rerun_run_a_schedule_with_its_arguments(tmp_path: Path, url: str) -> None:
    """`scheduler trigger @KEY` runs the schedule's job now with the schedule's
    arguments, as a manual run of its own `@KEY`; `rerun @KEY PERIOD` runs a period of
    it again as its next attempt. The template is its nodes' to register: a foreground
    run registers nothing under the schedule's name."""
    log = tmp_path / "executions.txt"

    def command(*args: str) -> subprocess.CompletedProcess[str]:
        every = [*args, "--jobs", jobmods("tenants"), "--database-url", url]
        result = run_command(every, tmp_path, EXECUTION_LOG=str(log))
        assert "Traceback" not in result.stderr, result.stderr
        return result

    triggered = command("trigger", f"@{WEEKLY}")
    assert triggered.returncode == 0, triggered.stderr
    (line,) = [json.loads(text) for text in log.read_text().splitlines()]
    assert (line["schedule"], line["tenant"], line["args"]) == (WEEKLY, 42, {"tenant": 42})
    database = open_database(url)
    try:
        (run,) = rows(database, "scheduler_runs", job=f"@{WEEKLY}")
        assert (run["status"], run["origin"], run["attempt"]) == ("succeeded", "manual", 1)
        names = {row["name"] for row in rows(database, "scheduler_jobs")}
        assert names == {"tenant_report"}
        period = run["period"].isoformat()
        refused = command("rerun", f"@{WEEKLY}", period)
        assert refused.returncode == 2
        assert "succeeded" in refused.stderr
        again = command("rerun", f"@{WEEKLY}", period, "--force")
        assert again.returncode == 0, again.stderr
        (run,) = rows(database, "scheduler_runs", job=f"@{WEEKLY}")
        assert (run["status"], run["attempt"]) == ("succeeded", 2)
    finally:
        database.dispose()
    assert len(log.read_text().splitlines()) == 2


@pytest.mark.parametrize(
    ("name", "modules", "message"),
    [
        ("@tenant-7:none", "tenants", "schedule 'tenant-7:none': key: no such schedule"),
        (f"@{WEEKLY}", "ticker", f"schedule '{WEEKLY}': job: 'tenant_report' is not in --jobs"),
    ],
)
def test_trigger_of_a_schedule_it_cannot_run_is_one_line_exit_2(
    tmp_path: Path, url: str, name: str, modules: str, message: str
) -> None:
    result = run_command(
        ["trigger", name, "--jobs", jobmods(modules), "--database-url", url], tmp_path
    )
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    database = open_database(url)
    try:
        assert rows(database, "scheduler_runs") == []
    finally:
        database.dispose()
