"""The Python API for operators, on real databases: the same operations and the same
one-line errors as the CLI, without a subprocess."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from scheduler.admin import Admin
from scheduler.cli import main
from scheduler.errors import UserError
from scheduler.node.repair import Action
from scheduler.states import Origin, RunStatus
from scheduler.store.database import Database
from tests.acceptance.jobmods.ledger import hourly_ledger
from tests.integration import seed

HOUR = (datetime.now(UTC) - timedelta(hours=3)).replace(minute=0, second=0, microsecond=0)


@pytest.fixture
def evidence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "executions.txt"
    monkeypatch.setenv("EXECUTION_LOG", str(path))
    monkeypatch.setenv("LEDGER_FAIL", "0")
    return path


def cli_error(database_url: str, *args: str) -> str:
    result = CliRunner().invoke(main, [*args, "--database-url", database_url])
    assert result.exit_code == 2, result.output
    return result.stderr.strip()


def test_an_admin_takes_a_url_or_a_database(database_url: str, database: Database) -> None:
    with Admin(database_url) as admin:
        assert admin.check().ok
    shared = Admin(database)
    shared.close()
    assert shared.check().ok, "a Database given stays open: it is the caller's"


def test_pause_resume_and_check_act_on_the_fleet(database_url: str, database: Database) -> None:
    seed.add_job(database, "billing", "0 0 1 1 *", first_seen=seed.now() - timedelta(days=400))
    with Admin(database_url) as admin:
        assert not admin.check().ok, "the yearly period has not run"
        admin.pause("billing")
        report = admin.check(job="billing", window="1h")
        assert (report.ok, report.paused) == (True, 1)
        admin.resume("billing")
        assert [finding.job for finding in admin.check().findings] == ["billing"]


@pytest.mark.parametrize(
    ("call", "args"),
    [
        (lambda admin: admin.pause("nobody"), ["pause", "nobody"]),
        (lambda admin: admin.runs(status="done"), ["runs", "--status", "done"]),
        (lambda admin: admin.runs(since="last week"), ["runs", "--since", "last week"]),
        (lambda admin: admin.run("nobody", "yesterday"), ["runs", "show", "nobody", "yesterday"]),
        (lambda admin: admin.run("f" * 32), ["runs", "show", "f" * 32]),
        (lambda admin: admin.check(window="soon"), ["check", "--window", "soon"]),
        (lambda admin: admin.check(job="nobody"), ["check", "--job", "nobody"]),
    ],
)
def test_bad_input_raises_the_line_the_cli_prints(database_url: str, call, args) -> None:
    with Admin(database_url) as admin, pytest.raises(UserError) as raised:
        call(admin)
    line = cli_error(database_url, *args)
    if args[:2] == ["runs", "--status"]:
        assert "done" in str(raised.value)  # click refuses the choice before we do
        assert "done" in line
    else:
        assert line == f"error: {raised.value}"


@pytest.mark.usefixtures("evidence")
def test_trigger_rerun_and_backfill_run_here(database_url: str) -> None:
    with Admin(database_url) as admin:
        manual = admin.trigger(hourly_ledger, node_name="admin-page")
        assert manual.succeeded
        assert manual.period.microsecond, "a manual period never collides with the schedule"
        (row,) = admin.runs(job="hourly-ledger")
        assert (row.id, row.origin) == (manual.run_id, Origin.MANUAL)
        assert str(row.holder).startswith("admin-page")
        assert admin.run(manual.run_id).run.period == manual.period

        span = (HOUR - timedelta(hours=2), HOUR)
        planned = admin.backfill(hourly_ledger, *span, dry_run=True)
        assert [step.action for step in planned.steps] == [Action.RUN] * 3
        assert admin.runs(job="hourly-ledger", limit=10) == [row], "a dry run writes nothing"
        done = admin.backfill(hourly_ledger, *span)
        assert (done.succeeded, done.failed, done.interrupted) == (3, 0, False)

        with pytest.raises(UserError, match="succeeded; add --force"):
            admin.rerun(hourly_ledger, HOUR)
        again = admin.rerun(hourly_ledger, HOUR.isoformat(), force=True)
        assert (again.status, again.succeeded) == (RunStatus.SUCCEEDED, True)
        assert admin.run("hourly-ledger", HOUR).run.attempt == 2
        with pytest.raises(UserError, match="give the @job function itself"):
            admin.trigger("hourly-ledger")  # type: ignore[arg-type]


def test_stuck_items_of_every_job_or_one(database_url: str, database: Database) -> None:
    period = datetime(2026, 1, 1, tzinfo=UTC)
    for job in ("mailer", "billing"):
        run_id = seed.add_run(database, job, period, "failed", finished_at=period)
        seed.add_item(database, job, f"{job}:1", period, run_id)
        seed.add_item(database, job, f"{job}:done", period, run_id, state="done")
    with Admin(database_url) as admin:
        assert sorted(item.key for item in admin.stuck_items()) == ["billing:1", "mailer:1"]
        assert [item.key for item in admin.stuck_items("mailer")] == ["mailer:1"]
