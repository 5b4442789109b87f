"""`postgres://`, as hosting platforms hand it out, is a PostgreSQL URL like `postgresql://`."""

from __future__ import annotations

from pathlib import Path

from tests.acceptance.processes import run_command


def test_a_postgres_scheme_url_migrates_and_reads(tmp_path: Path, empty_postgres_url: str) -> None:
    url = empty_postgres_url.replace("postgresql://", "postgres://", 1)
    assert url.startswith("postgres://")
    migrated = run_command(["migrate", "--database-url", url, "--log-format", "json"], tmp_path)
    assert migrated.returncode == 0, migrated.stderr
    assert "Traceback" not in migrated.stderr
    checked = run_command(["check", "--database-url", url], tmp_path)
    assert (checked.returncode, checked.stderr) == (0, ""), checked.stderr
    assert checked.stdout.startswith("ok: 0 jobs")
