"""SQLAlchemy serves the migrations alone: a read-only command, and a node from its
imports to its schema check (or `--migrate` on a schema already current), load none of
it on either backend (it is 14 MiB of a node's memory and 0.1 s of a command's start)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _modules_after_probe(probe: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", f"{probe}\nimport sys\nprint('\\n'.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return set(done.stdout.split())


@pytest.mark.parametrize("command", ["jobs", "runs", "nodes", "check"])
def test_a_read_only_command_reads_without_sqlalchemy(command: str, database_url: str) -> None:
    """On either backend: the commands read through the drivers alone."""
    loaded = _modules_after_probe(
        "from scheduler.cli.main import main\n"
        f"try:\n    main.main([{command!r}, '--database-url', {database_url!r}],"
        " standalone_mode=False)\n"
        "except SystemExit:\n    pass"
    )
    assert "scheduler.store.database" in loaded
    assert "sqlalchemy" not in loaded
    assert "alembic" not in loaded


def test_a_node_opens_its_database_without_sqlalchemy(database_url: str) -> None:
    """Everything a node imports to run, and its start-up's schema check (and
    `--migrate` on a schema already current), loads no SQLAlchemy."""
    loaded = _modules_after_probe(
        "import scheduler.cli.serve, scheduler.node.daemon, scheduler.node.foreground\n"
        "import scheduler.run.dispatcher, scheduler.node.liveness\n"
        "from scheduler.store import migrate\n"
        "from scheduler.store.database import open_database\n"
        f"database = open_database({database_url!r})\n"
        "migrate.upgrade(database)\n"
        "migrate.require_current_schema(database)"
    )
    assert "scheduler.node.daemon" in loaded
    assert "sqlalchemy" not in loaded
    assert "alembic" not in loaded
