"""`scheduler jobs|runs|runs show|nodes --json`, parsed and checked against the tables."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner, Result

from scheduler.cli import main
from scheduler.cron import parse_schedule
from scheduler.store.database import Database
from tests import sql
from tests.integration import seed

T0 = datetime(2025, 6, 10, 3, 0, tzinfo=UTC)


def invoke(database_url: str, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--database-url", database_url])


def as_json(database_url: str, *args: str) -> Any:
    result = invoke(database_url, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def instant(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


@pytest.fixture
def history(database: Database) -> dict[str, str]:
    """Two jobs, a paused one, runs in several states, a retried run, three nodes."""
    seed.add_job(database, "billing", "0 3 * * *", first_seen=T0 - timedelta(days=10))
    seed.add_job(database, "digest", "*/5 * * * *", first_seen=T0 - timedelta(days=1))
    seed.add_job(database, "idle", "0 0 1 * *", first_seen=T0, paused=True)
    ids = {}
    for day in range(3):
        period = T0 - timedelta(days=day)
        ids[f"billing-{day}"] = seed.add_run(
            database, "billing", period, "succeeded", finished_at=period, duration_ms=1500
        )
    retried = T0 + timedelta(days=1)
    ids["retried"] = seed.add_run(
        database,
        "billing",
        retried,
        "failed",
        attempt=3,
        holder="node-3",
        finished_at=retried + timedelta(seconds=2),
        duration_ms=2000,
        error="third time unlucky",
    )
    seed.add_attempt(database, ids["retried"], "billing", retried, 1, "first failure")
    seed.add_attempt(database, ids["retried"], "billing", retried, 2, "second failure")
    for minutes in (0, 5, 10):
        period = T0 + timedelta(minutes=minutes)
        status, reason = ("skipped", "overlap") if minutes == 5 else ("succeeded", None)
        seed.add_run(database, "digest", period, status, reason=reason, finished_at=period)
    seed.add_node(database, "alive-node", heartbeat_at=seed.now())
    seed.add_node(
        database,
        "stopped-node",
        heartbeat_at=seed.now() - timedelta(minutes=1),
        stopped_at=seed.now() - timedelta(minutes=1),
    )
    seed.add_node(database, "lost-node", heartbeat_at=seed.now() - timedelta(minutes=10))
    seed.add_node(database, "ancient-node", heartbeat_at=seed.now() - timedelta(days=3))
    return ids


def test_jobs_json_matches_the_jobs_and_runs_tables(
    database_url: str, database: Database, history: dict[str, str]
) -> None:
    before = seed.now()
    records = as_json(database_url, "jobs")
    table_jobs = {row["name"]: row for row in seed.rows(database, "scheduler_jobs")}
    assert [record["name"] for record in records] == sorted(table_jobs)
    all_runs = seed.rows(database, "scheduler_runs")
    for record in records:
        row = table_jobs[record["name"]]
        assert (record["cron"], record["timezone"], record["paused"]) == (
            row["cron"],
            row["timezone"],
            row["paused"],
        )
        assert record["alert_after_s"] == row["alert_after_seconds"]
        schedule = parse_schedule(row["cron"], row["timezone"])
        assert instant(record["next_period"]) in {
            schedule.next_after(before - timedelta(seconds=1)),
            schedule.next_after(seed.now()),
        }
        own = [run for run in all_runs if run["job"] == record["name"]]
        if not own:
            assert record["last_run"] is None
            continue
        newest = max(own, key=lambda run: run["period"])
        assert instant(record["last_run"]["period"]) == newest["period"]
        assert record["last_run"]["status"] == newest["status"]
        assert record["last_run"]["attempt"] == newest["attempt"]
    by_name = {record["name"]: record for record in records}
    assert by_name["billing"]["last_run"]["status"] == "failed"
    assert by_name["digest"]["last_run"]["status"] == "succeeded"
    assert by_name["idle"]["paused"] is True


def _keys(records: list[dict[str, Any]]) -> list[tuple[str, datetime | None, str, int, str]]:
    return [(r["job"], instant(r["period"]), r["status"], r["attempt"], r["node"]) for r in records]


def _expected(
    database: Database, predicate: Any = lambda run: True, limit: int = 50
) -> list[tuple[str, datetime | None, str, int, str]]:
    chosen = [run for run in seed.rows(database, "scheduler_runs") if predicate(run)]
    chosen.sort(key=lambda run: (-run["period"].timestamp(), run["job"]))
    return [
        (run["job"], run["period"], run["status"], run["attempt"], run["holder"])
        for run in chosen[:limit]
    ]


@pytest.mark.usefixtures("history")
def test_runs_json_matches_the_runs_table_under_each_filter(
    database_url: str, database: Database
) -> None:
    assert _keys(as_json(database_url, "runs")) == _expected(database)
    assert _keys(as_json(database_url, "runs", "--job", "digest")) == _expected(
        database, lambda run: run["job"] == "digest"
    )
    assert _keys(as_json(database_url, "runs", "--status", "failed", "--status", "skipped")) == (
        _expected(database, lambda run: run["status"] in ("failed", "skipped"))
    )
    since = T0 + timedelta(minutes=5)
    assert _keys(as_json(database_url, "runs", "--since", "2025-06-10T03:05:00Z")) == _expected(
        database, lambda run: run["period"] >= since
    )
    assert _keys(as_json(database_url, "runs", "--limit", "2")) == _expected(database, limit=2)
    # A duration reaches back from now: these periods are all long past.
    assert as_json(database_url, "runs", "--since", "1h") == []


def test_each_run_record_carries_its_row(
    database_url: str, database: Database, history: dict[str, str]
) -> None:
    (record,) = as_json(database_url, "runs", "--status", "failed")
    (row,) = sql.rows(database, "scheduler_runs", id=history["retried"])
    assert record["id"] == row["id"]
    assert record["duration_ms"] == row["duration_ms"] == 2000
    assert record["error_type"] == row["error_type"]
    assert record["error_message"] == row["error_message"]
    assert instant(record["finished_at"]) == row["finished_at"]
    assert record["period"].endswith("Z")


def test_runs_show_lists_every_attempt_with_its_traceback(
    database_url: str, database: Database, history: dict[str, str]
) -> None:
    detail = as_json(database_url, "runs", "show", "billing", "2025-06-11T03:00:00Z")
    run = detail["run"]
    assert run["id"] == history["retried"]
    assert (run["status"], run["attempt"], run["node"]) == ("failed", 3, "node-3")
    recorded = sql.rows(database, "scheduler_attempts", run_id=run["id"])
    listed = detail["attempts"]
    assert [attempt["attempt"] for attempt in listed] == [1, 2, 3]
    assert [attempt["current"] for attempt in listed] == [False, False, True]
    for attempt, row in zip(listed, sorted(recorded, key=lambda r: r["attempt"]), strict=False):
        assert (attempt["node"], attempt["status"], attempt["error_message"]) == (
            row["node"],
            row["status"],
            row["error_message"],
        )
        assert attempt["error_traceback"] == row["error_traceback"]
    assert listed[2]["error_message"] == "third time unlucky"
    assert "ValueError: third time unlucky" in listed[2]["error_traceback"]

    text = invoke(database_url, "runs", "show", "billing", "2025-06-11T03:00:00+00:00")
    assert text.exit_code == 0, text.output
    for fragment in ("first failure", "second failure", "RuntimeError", "third time unlucky"):
        assert fragment in text.stdout


@pytest.mark.usefixtures("history")
def test_runs_show_of_an_unknown_run_is_a_user_error(database_url: str) -> None:
    result = invoke(database_url, "runs", "show", "billing", "2020-01-01T00:00:00")
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: no run of job 'billing' for period 2020-01-01T00:00:00Z"
    result = invoke(database_url, "runs", "show", "billing", "yesterday")
    assert result.exit_code == 2
    assert "PERIOD: cannot read 'yesterday'" in result.stderr
    result = invoke(database_url, "runs", "--since", "last week")
    assert result.exit_code == 2
    assert "--since" in result.stderr


def test_nodes_json_matches_the_nodes_table(
    database_url: str, database: Database, history: dict[str, str]
) -> None:
    del history
    records = as_json(database_url, "nodes")
    states = {record["id"]: record["state"] for record in records}
    assert states == {"alive-node": "alive", "stopped-node": "stopped", "lost-node": "lost"}
    table_rows = {row["id"]: row for row in seed.rows(database, "scheduler_nodes")}
    for record in records:
        row = table_rows[record["id"]]
        assert (record["host"], record["pid"], record["version"]) == (
            row["host"],
            row["pid"],
            row["version"],
        )
        assert instant(record["heartbeat_at"]) == row["heartbeat_at"]
        assert instant(record["stopped_at"]) == row["stopped_at"]
    everyone = as_json(database_url, "nodes", "--all")
    assert {record["id"] for record in everyone} == set(table_rows)


@pytest.mark.usefixtures("history")
def test_tables_are_aligned_for_people(database_url: str) -> None:
    result = invoke(database_url, "runs", "--job", "billing")
    assert result.exit_code == 0, result.output
    header, *lines = result.stdout.splitlines()
    assert header.split() == [
        "JOB",
        "PERIOD",
        "STATUS",
        "ORIGIN",
        "ATTEMPT",
        "NODE",
        "DURATION",
        "ERROR",
    ]
    column = header.index("STATUS")
    assert all(line[column - 2 : column] == "  " for line in lines)
    assert "ValueError: third time unlucky" in lines[0]
    origin = header.index("ORIGIN")
    assert lines[0][origin:].split()[0] == "retry", "attempt 3 of a scheduled period"
    assert lines[1][origin:].split()[0] == "schedule"
    assert "1.5s" in lines[1]
    jobs_text = invoke(database_url, "jobs").stdout
    assert "skipped (overlap)" not in jobs_text
    assert jobs_text.splitlines()[0].split()[:3] == ["JOB", "SCHEDULE", "ZONE"]


@pytest.mark.usefixtures("history")
def test_runs_show_finds_a_run_by_its_id_and_by_the_period_as_printed(
    database_url: str, database: Database, history: dict[str, str]
) -> None:
    manual = T0 + timedelta(hours=5, microseconds=123_456)
    seed.add_run(database, "billing", manual, "succeeded", origin="manual", finished_at=manual)
    backfilled = T0 - timedelta(days=5)
    seed.add_run(database, "billing", backfilled, "succeeded", origin="backfill")

    by_id = as_json(database_url, "runs", "show", history["retried"])
    assert (by_id["run"]["id"], by_id["run"]["attempt"]) == (history["retried"], 3)

    table = invoke(database_url, "runs", "--job", "billing").stdout.splitlines()
    origins = {line.split()[1]: line.split()[3] for line in table[1:]}
    printed = "2025-06-10T08:00:00.123456Z"
    assert origins[printed] == "manual"
    assert origins["2025-06-05T03:00:00Z"] == "backfill"
    assert origins["2025-06-11T03:00:00Z"] == "retry"
    for period in (printed, "2025-06-10T08:00:00Z", "2025-06-10T08:00:00.123456+00:00"):
        detail = as_json(database_url, "runs", "show", "billing", period)
        assert detail["run"]["period"] == printed, period
        assert detail["run"]["origin"] == "manual"

    records = {record["period"]: record for record in as_json(database_url, "runs")}
    assert records[printed]["retry"] is False
    assert records["2025-06-11T03:00:00Z"]["retry"] is True

    unknown = invoke(database_url, "runs", "show", "0" * 32)
    assert unknown.exit_code == 2
    assert unknown.stderr.startswith(f"error: no run with id {'0' * 32!r}")
