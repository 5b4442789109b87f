"""`scheduler check` against real databases: exit 1 and a list when something is wrong."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from click.testing import CliRunner, Result

from scheduler.cli import main
from scheduler.store.database import Database
from tests.integration import seed
from tests.sql import update

# A yearly job: its latest expected period is the same whenever this test runs.
YEARLY = "0 0 1 1 *"
LAST_NEW_YEAR = datetime(datetime.now(UTC).year, 1, 1, tzinfo=UTC)
LONG_AGO = LAST_NEW_YEAR - timedelta(days=400)


def check(database_url: str, *args: str) -> tuple[Result, dict[str, Any]]:
    result = CliRunner().invoke(main, ["check", "--database-url", database_url, "--json", *args])
    return result, json.loads(result.stdout)


def problems(report: dict[str, Any]) -> list[tuple[str, str, datetime]]:
    return [
        (f["problem"], f["job"], datetime.fromisoformat(f["period"])) for f in report["findings"]
    ]


def test_a_fresh_database_is_fine(database_url: str) -> None:
    result, report = check(database_url)
    assert result.exit_code == 0, result.output
    assert report["ok"] is True
    assert (report["jobs"], report["nodes_alive"], report["findings"]) == (0, 0, [])
    text = CliRunner().invoke(main, ["check", "--database-url", database_url])
    assert text.exit_code == 0
    assert text.stdout.startswith("ok: 0 jobs")


def test_a_job_with_no_success_for_its_expected_period_is_overdue(
    database_url: str, database: Database
) -> None:
    seed.add_job(database, "yearly-report", YEARLY, first_seen=LONG_AGO)
    result, report = check(database_url)
    assert result.exit_code == 1
    assert problems(report) == [("overdue", "yearly-report", LAST_NEW_YEAR)]
    assert report["findings"][0]["status"] is None

    text = CliRunner().invoke(main, ["check", "--database-url", database_url])
    assert text.exit_code == 1
    assert text.stdout.splitlines()[0].split()[:2] == ["OVERDUE", "yearly-report"]

    seed.add_run(database, "yearly-report", LAST_NEW_YEAR, "succeeded", finished_at=LAST_NEW_YEAR)
    result, report = check(database_url)
    assert (result.exit_code, report["findings"]) == (0, [])


def test_a_job_first_seen_after_its_last_period_owes_nothing_yet(
    database_url: str, database: Database
) -> None:
    seed.add_job(database, "new-report", YEARLY, first_seen=LAST_NEW_YEAR + timedelta(hours=1))
    result, report = check(database_url)
    assert (result.exit_code, report["jobs"]) == (0, 1)


def test_a_failed_period_is_listed_within_the_window(database_url: str, database: Database) -> None:
    seed.add_job(database, "hourly", "0 * * * *", first_seen=seed.now(), alert_after=3600)
    failed_at = seed.now() - timedelta(hours=2)
    seed.add_run(
        database,
        "hourly",
        failed_at.replace(minute=0, second=0, microsecond=0),
        "failed",
        finished_at=seed.now() - timedelta(minutes=5),
        error="card declined",
    )
    result, report = check(database_url)
    assert result.exit_code == 1
    (finding,) = report["findings"]
    assert (finding["problem"], finding["job"], finding["status"]) == ("failed", "hourly", "failed")
    assert finding["detail"] == "ValueError: card declined"

    # A narrower window no longer reaches the failure.
    result, report = check(database_url, "--window", "1m")
    assert (result.exit_code, report["findings"], report["window_s"]) == (0, [], 60)


def test_missed_and_timed_out_periods_are_listed_and_pending_retries_are_not(
    database_url: str, database: Database
) -> None:
    seed.add_job(database, "nightly", "0 3 * * *", first_seen=seed.now(), retries=2)
    base = datetime(2025, 1, 1, 3, tzinfo=UTC)
    recently = seed.now() - timedelta(minutes=1)
    seed.add_run(database, "nightly", base, "missed", reason="window")
    # The missed row above was claimed (recorded) long ago; this one just now.
    missed_now = base + timedelta(days=1)
    seed.add_run(
        database, "nightly", missed_now, "missed", reason="window", holder=None, claimed_at=recently
    )
    seed.add_run(database, "nightly", base + timedelta(days=2), "timed_out", finished_at=recently)
    seed.add_run(
        database,
        "nightly",
        base + timedelta(days=3),
        "failed",
        finished_at=recently,
        retry_at=seed.now(),
        error="flaky",
    )
    result, report = check(database_url)
    assert result.exit_code == 1
    assert problems(report) == [
        ("missed", "nightly", missed_now),
        ("timed_out", "nightly", base + timedelta(days=2)),
    ]


def test_a_paused_job_is_not_overdue(database_url: str, database: Database) -> None:
    seed.add_job(database, "yearly-report", YEARLY, first_seen=LONG_AGO, paused=True)
    result, report = check(database_url)
    assert result.exit_code == 0, result.output
    assert (report["jobs"], report["paused"], report["findings"]) == (1, 1, [])


def test_check_can_look_at_one_job(database_url: str, database: Database) -> None:
    seed.add_job(database, "yearly-report", YEARLY, first_seen=LONG_AGO)
    seed.add_job(database, "healthy", YEARLY, first_seen=LONG_AGO)
    seed.add_run(database, "healthy", LAST_NEW_YEAR, "succeeded", finished_at=LAST_NEW_YEAR)
    result, report = check(database_url, "--job", "healthy")
    assert (result.exit_code, report["jobs"]) == (0, 1)
    result, report = check(database_url)
    assert (result.exit_code, report["jobs"]) == (1, 2)

    unknown = CliRunner().invoke(main, ["check", "--database-url", database_url, "--job", "nope"])
    assert unknown.exit_code == 2
    assert unknown.stderr.strip() == "error: --job: no job named 'nope' has been registered"
    bad_window = CliRunner().invoke(
        main, ["check", "--database-url", database_url, "--window", "soon"]
    )
    assert bad_window.exit_code == 2
    assert bad_window.stderr.startswith("error: --window:")


def test_a_run_abandoned_for_good_is_listed(database_url: str, database: Database) -> None:
    """A run given up after its node died again and again (no retry is coming) is a
    period that never ran: `check` must say so."""
    seed.add_job(database, "hourly", "0 * * * *", first_seen=seed.now(), alert_after=3600)
    period = (seed.now() - timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)
    seed.add_run(
        database,
        "hourly",
        period,
        "abandoned",
        reason="lease_expired",
        attempt=3,
        finished_at=seed.now() - timedelta(minutes=5),
    )
    seed.add_run(
        database,
        "hourly",
        period + timedelta(hours=1),
        "abandoned",
        reason="shutdown",
        finished_at=seed.now() - timedelta(minutes=4),
        retry_at=seed.now(),
    )
    result, report = check(database_url)
    assert result.exit_code == 1
    assert problems(report) == [("abandoned", "hourly", period)], "only the one given up"


def test_a_run_still_running_past_its_timeout_is_listed_however_old(
    database_url: str, database: Database
) -> None:
    """A timed-out run whose lease its holder still keeps (its function has not returned
    in its thread) is `lingering`, listed instead of its `timed_out` even outside the
    window; once the lease is dropped or ran out (a dead holder) it is a `timed_out`
    recorded like any other."""
    seed.add_job(database, "hourly", "0 * * * *", first_seen=seed.now(), alert_after=3600)
    period = (seed.now() - timedelta(hours=3)).replace(minute=0, second=0, microsecond=0)
    run_id = seed.add_run(
        database,
        "hourly",
        period,
        "timed_out",
        finished_at=seed.now() - timedelta(minutes=10),
        duration_ms=30_000,
    )
    with database.transaction() as connection:
        lease = seed.now() + timedelta(seconds=30)
        update(connection, "scheduler_runs", {"id": run_id}, lease_expires_at=lease)
    for window in ("1d", "1m"):
        result, report = check(database_url, "--window", window)
        assert result.exit_code == 1, result.output
        (finding,) = report["findings"]
        assert (finding["problem"], finding["job"], finding["status"]) == (
            "lingering",
            "hourly",
            "timed_out",
        )
        assert finding["detail"].startswith("timed out after 30.0s and still running on node-a (")
        assert finding["detail"].endswith("later periods are skipped until it returns")
    text = CliRunner().invoke(main, ["check", "--database-url", database_url])
    assert text.stdout.splitlines()[0].split()[:2] == ["LINGERING", "hourly"]

    with database.transaction() as connection:
        gone = seed.now() - timedelta(seconds=1)
        update(connection, "scheduler_runs", {"id": run_id}, lease_expires_at=gone)
    result, report = check(database_url)
    assert result.exit_code == 1
    assert problems(report) == [("timed_out", "hourly", period)]
    result, report = check(database_url, "--window", "1m")
    assert (result.exit_code, report["findings"]) == (0, [])
