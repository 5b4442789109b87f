"""Bad input: one line on stderr naming the job and the field, exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.acceptance.processes import jobmods, run_command
from tests.acceptance.records import table_counts

EMPTY = {"scheduler_runs": 0, "scheduler_jobs": 0, "scheduler_nodes": 0}


def _refuse(tmp_path: Path, database_url: str, *args: str) -> str:
    result = run_command(
        ["run", "--database-url", database_url, "--log-format", "json", *args], tmp_path
    )
    assert result.returncode == 2, result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("bad_minute", ["job 'bad-minute'", "cron", "minute", "61"]),
        ("impossible_date", ["job 'leap-dreams'", "cron", "never"]),
        ("unknown_zone", ["job 'martian-morning'", "timezone", "Mars/Olympus_Mons"]),
        ("twin_a,twin_b", ["job 'twin'", "name", "twice"]),
        ("broken_import", ["broken_import", "ZeroDivisionError", "broken_import.py:3"]),
        ("no_such_module", ["--jobs", "no_such_module"]),
    ],
)
def test_bad_job_definitions_are_refused(
    tmp_path: Path, sqlite_url: str, module: str, expected: list[str]
) -> None:
    line = _refuse(tmp_path, sqlite_url, "--jobs", jobmods(module))
    for fragment in expected:
        assert fragment in line, line
    assert table_counts(sqlite_url) == EMPTY


def test_bad_definitions_leave_postgres_untouched(tmp_path: Path, postgres_url: str) -> None:
    line = _refuse(tmp_path, postgres_url, "--jobs", jobmods("ticker,bad_minute"))
    assert "job 'bad-minute'" in line
    assert table_counts(postgres_url) == EMPTY


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("not a url", "cannot parse"),
        ("mysql://root@127.0.0.1/test", "unsupported database 'mysql'"),
        ("foo://somewhere/db", "unsupported database 'foo'"),
        ("postgresql+psycopg2://postgres@127.0.0.1/postgres", "psycopg 3"),
        ("postgresql://postgres@127.0.0.1:1/nowhere", "cannot connect"),
        ("sqlite:///missing/dir/scheduler.db", "does not exist"),
    ],
)
def test_bad_database_urls_are_refused(tmp_path: Path, url: str, expected: str) -> None:
    line = _refuse(tmp_path, url, "--jobs", jobmods("ticker"))
    assert "--database-url" in line
    assert expected in line
    assert list(tmp_path.iterdir()) == []


def test_an_empty_schema_asks_for_migrate(tmp_path: Path, empty_postgres_url: str) -> None:
    line = _refuse(tmp_path, empty_postgres_url, "--jobs", jobmods("ticker"))
    assert "scheduler migrate" in line


def test_an_unmigrated_sqlite_file_asks_for_migrate(tmp_path: Path) -> None:
    line = _refuse(tmp_path, f"sqlite:///{tmp_path / 'absent.db'}", "--jobs", jobmods("ticker"))
    assert "scheduler migrate" in line
    assert not (tmp_path / "absent.db").exists()


def test_migrate_then_run_accepts_the_same_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    result = run_command(["migrate", "--database-url", url, "--log-format", "json"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert '"event": "schema_migrated"' in result.stdout
    assert table_counts(url) == EMPTY
