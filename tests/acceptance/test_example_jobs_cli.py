"""The example jobs use the database the command was given, flag or variable."""

from __future__ import annotations

from pathlib import Path

from scheduler.store.database import open_database
from tests.acceptance.processes import run_command
from tests.sql import table_names


def test_the_examples_follow_database_url(tmp_path: Path, sqlite_url: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = run_command(
        [
            "run-once",
            "cleanup",
            "--period",
            "2026-11-30T02:30:00Z",
            "--jobs",
            "jobs",
            "--database-url",
            sqlite_url,
        ],
        elsewhere,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert list(elsewhere.iterdir()) == [], "not the default sqlite:///scheduler.db"
    database = open_database(sqlite_url)
    try:
        with database.autocommit() as connection:
            tables = table_names(connection)
    finally:
        database.dispose()
    assert {"example_sessions", "example_customers"} <= tables
