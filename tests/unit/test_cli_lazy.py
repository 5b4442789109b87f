"""The command list `--help` prints without importing any command is the one click
would print from the commands themselves; a read-only command loads neither the daemon,
the run path nor the web console; `plan --cron` loads no database library at all (what
the commands and a node load once a database is open: tests/integration/test_lazy_store.py)."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from alembic.config import Config
from alembic.script import ScriptDirectory

from scheduler.cli.main import COMMANDS, main, summary_of
from scheduler.store import migrate


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_summary_is_the_commands_own(name: str) -> None:
    command = main.get_command(click.Context(main), name)
    assert command is not None
    assert command.name == name
    for limit in (40, 60, 200):
        assert summary_of(name).get_short_help_str(limit) == command.get_short_help_str(limit)


def _modules_after(*args: str) -> set[str]:
    probe = (
        "import sys\n"
        "from scheduler.cli.main import main\n"
        f"try:\n    main.main({list(args)!r}, standalone_mode=False)\n"
        "except SystemExit:\n    pass\n"
        "print('\\n'.join(sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return set(done.stdout.split())


def test_help_imports_no_command() -> None:
    loaded = _modules_after("--help")
    assert not {module for module in loaded if module.startswith("scheduler.cli.")} - {
        "scheduler.cli.main",
        "scheduler.cli.group",
    }
    assert "sqlalchemy" not in loaded


def test_a_view_loads_neither_the_daemon_nor_the_console() -> None:
    loaded = _modules_after("jobs", "--help")
    assert "scheduler.cli.views" in loaded
    for heavy in ("scheduler.node.daemon", "scheduler.console", "flask", "scheduler.http"):
        assert heavy not in loaded, heavy
    # Nor the run path (Admin reads through the store; only running needs a Foreground).
    assert not {module for module in loaded if module.startswith("scheduler.run")}
    assert "scheduler.node.foreground" not in loaded
    assert "sqlalchemy.orm" not in loaded


def test_plan_with_cron_loads_only_the_cron_parser() -> None:
    loaded = _modules_after("plan", "--cron", "0 * * * *", "--count", "1")
    assert "scheduler.cli.plan" in loaded
    assert "scheduler.cron" in loaded
    for heavy in ("sqlalchemy", "psycopg", "structlog", "scheduler.store", "scheduler.registry"):
        assert heavy not in loaded, heavy


def test_importing_the_package_loads_no_job_machinery() -> None:
    """`from scheduler import job` still works (below); `import scheduler.cli` alone
    must not pay for it."""
    loaded = _modules_after("--help")
    for heavy in ("structlog", "apscheduler", "scheduler.registry", "scheduler.run.context"):
        assert heavy not in loaded, heavy
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from scheduler import job, RunContext, Event, on_event; print(job)",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert "function job" in done.stdout


def test_the_revisions_read_without_alembic_are_alembics() -> None:
    config = Config()
    config.set_main_option("script_location", str(migrate.migrations_path()))
    script = ScriptDirectory.from_config(config)
    assert migrate.head_revision() == script.get_current_head()
    assert migrate.known_revisions() == {rev.revision for rev in script.walk_revisions()}


def test_a_node_starts_without_importing_alembic() -> None:
    loaded = _modules_after("run", "--help")
    assert "scheduler.cli.serve" in loaded
    assert "alembic" not in loaded
