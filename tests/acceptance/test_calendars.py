"""Calendars on real nodes (issue 44, item 4): three `scheduler run` processes on
PostgreSQL (one on SQLite). A job whose calendar of dates excludes today, one whose
calendar is a function excluding today's day of the week, and a schedule created at run
time from a template with the first calendar, have every period of today recorded
`skipped (calendar)`, none run, none alerted; a job whose calendar does not exclude
today runs. Each calendar whose dates end within 30 days is one `calendar_ending`
event, heard once whatever the replica count, and a `check` finding; the jobs' views
name their calendars."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from scheduler.schedules import Schedules
from tests.acceptance.processes import jobmods, run_command, start_node
from tests.acceptance.records import run_rows
from tests.waiting import wait_until

pytestmark = pytest.mark.slow


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _today(rows: list[dict[str, Any]], today: str) -> list[dict[str, Any]]:
    return [row for row in rows if row["period"].astimezone(UTC).date().isoformat() == today]


def test_periods_on_excluded_days_are_skipped_and_ending_calendars_warn(
    tmp_path: Path, database_url: str
) -> None:
    now = datetime.now(UTC)
    if (now + timedelta(seconds=40)).date() != now.date():  # about to change day: wait
        time.sleep(45)
        now = datetime.now(UTC)
    today, tomorrow = now.date().isoformat(), (now.date() + timedelta(days=1)).isoformat()
    replicas = 3 if database_url.startswith("postgresql") else 1
    executions, heard = tmp_path / "executions.jsonl", tmp_path / "heard.jsonl"
    env = {
        "HOLIDAY": today,
        "WORKDAY_OFF": tomorrow,
        "EXECUTION_LOG": str(executions),
        "HEARD_LOG": str(heard),
    }
    nodes = [
        start_node(tmp_path, f"node-{n}", database_url, "holidays", **env) for n in range(replicas)
    ]
    try:
        for node in nodes:
            node.wait_for(lambda event: event.get("event") == "node_started")
        with Schedules(database_url) as schedules:
            schedules.create("tenant-1:sync", "tenant_sync", cron="* * * * * *", args={"tenant": 1})
        wait_until(lambda: len(_lines(heard)) >= 3, timeout=30)
        time.sleep(5)
        checked = run_command(["check", "--database-url", database_url, "--json"], tmp_path)
        listed = run_command(["jobs", "--database-url", database_url, "--json"], tmp_path)
    finally:
        codes = [node.stop() for node in nodes]
    assert codes == [0] * replicas, [node.log_path.read_text()[-2000:] for node in nodes]
    holiday = _today(run_rows(database_url, "holiday"), today)
    scheduled = _today(run_rows(database_url, "@tenant-1:sync"), today)
    day_off = _today(run_rows(database_url, "day_off"), today)
    workday = _today(run_rows(database_url, "workday"), today)
    assert len(holiday) >= 5
    assert len(day_off) >= 5
    assert len(scheduled) >= 3
    assert {(row["status"], row["reason"]) for row in holiday + day_off + scheduled} == {
        ("skipped", "calendar")
    }
    assert sum(row["status"] == "succeeded" for row in workday) >= 5
    ran = {(line["job"], line["period"][:10]) for line in _lines(executions)}
    assert ("holiday", today) not in ran
    assert ("day_off", today) not in ran
    assert ("@tenant-1:sync", today) not in ran
    assert ("workday", today) in ran
    # Heard once each, whatever the replica count; no skip or miss was news.
    keys = sorted(line["key"] for line in _lines(heard))
    assert keys == [
        f"holiday/{today}T00:00:00Z/calendar_ending/company-holidays",
        f"tenant_sync/{today}T00:00:00Z/calendar_ending/company-holidays",
        f"workday/{tomorrow}T00:00:00Z/calendar_ending/ops-days-off",
    ], keys
    report = json.loads(checked.stdout)
    ending = sorted(
        (f["job"], f["period"][:10])
        for f in report["findings"]
        if f["problem"] == "calendar_ending"
    )
    assert ending == [("holiday", today), ("tenant_sync", today), ("workday", tomorrow)]
    assert not [f for f in report["findings"] if f["problem"] == "overdue"], report["findings"]
    planned = run_command(
        [
            "plan",
            "holiday",
            "--jobs",
            jobmods("holidays"),
            "--after",
            f"{today}T00:00:00Z",
            "--count",
            "2",
            "--json",
        ],
        tmp_path,
        60.0,
        **env,
    )
    assert [json.loads(line)["skipped_by_calendar"] for line in planned.stdout.splitlines()] == [
        "company-holidays",
        "company-holidays",
    ], planned.stderr
    calendars = {record["name"]: record["calendars"] for record in json.loads(listed.stdout)}
    assert calendars["holiday"] == [{"name": "company-holidays", "last": today}]
    assert calendars["workday"] == [{"name": "ops-days-off", "last": tomorrow}]
    assert calendars["day_off"] == [{"name": "weekly-day-off", "last": None}]
