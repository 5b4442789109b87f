"""The Django app with real `python manage.py` processes of the example project
(examples/django): two replicas on one PostgreSQL database run each period once and
write each invoice once through the ORM; `manage.py migrate` makes exactly the schema
`scheduler migrate` makes; a mistake in the settings is one line."""

from __future__ import annotations

import os
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from scheduler.states import RunStatus
from scheduler.store import migrate
from scheduler.store.database import open_database
from tests.acceptance.django_project import EXAMPLE, manage, start_replica
from tests.acceptance.processes import REPOSITORY, run_command
from tests.acceptance.records import run_rows
from tests.databases import postgres_database
from tests.sql import rows

pytestmark = pytest.mark.slow
PERIOD_S = 2
# Periods whose second is a multiple of 6 fail once after their invoice committed.
RETRIED_EVERY_S = 6


def _table(database_url: str, table: str) -> list[dict[str, Any]]:
    database = open_database(database_url)
    try:
        return rows(database, table, order_by="period")
    finally:
        database.dispose()


def _succeeded(database_url: str) -> list[dict[str, Any]]:
    return [
        row for row in run_rows(database_url, "invoice") if row["status"] == RunStatus.SUCCEEDED
    ]


@pytest.mark.postgres
def test_two_replicas_run_each_period_once_and_write_each_invoice_once(
    tmp_path: Path, empty_postgres_url: str
) -> None:
    url = empty_postgres_url
    migrated = manage(url, "migrate", "--no-input")
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    assert f"Scheduler tables: upgraded from None to {migrate.head_revision()}" in migrated.stdout
    replicas = [start_replica(tmp_path, name, url) for name in ("a", "b")]
    try:
        for replica in replicas:
            replica.wait_for(lambda event: event.get("event") == "node_started", timeout=60)
        deadline = time.monotonic() + 90
        # Enough periods that several were retried after writing (one in three).
        while len(_succeeded(url)) < 9 and time.monotonic() < deadline:
            for replica in replicas:
                assert replica.process.poll() is None, replica.log_path.read_text()[-3000:]
            time.sleep(0.5)
    finally:
        statuses = [replica.stop() for replica in replicas]
    assert statuses == [0, 0]
    runs = run_rows(url, "invoice")
    succeeded = [row for row in runs if row["status"] == RunStatus.SUCCEEDED]
    assert len(succeeded) >= 9, runs
    # No period lost between the first and the last that succeeded: each has its row,
    # and each of those succeeded.
    first, last = succeeded[0]["period"], succeeded[-1]["period"]
    between = [row for row in runs if first <= row["period"] <= last]
    expected = int((last - first) / timedelta(seconds=PERIOD_S)) + 1
    assert [row["period"] for row in between] == [
        first + timedelta(seconds=PERIOD_S * n) for n in range(expected)
    ]
    assert {row["status"] for row in between} == {RunStatus.SUCCEEDED}
    retried = [row for row in between if row["period"].second % RETRIED_EVERY_S == 0]
    assert retried
    assert {row["attempt"] for row in retried} == {2}
    # Each succeeded period wrote exactly one invoice, by its first attempt, and nothing
    # else wrote one: the ORM's row and the item committed together.
    invoices = _table(url, "billing_invoice")
    per_period = Counter(row["period"] for row in invoices)
    assert set(per_period.values()) == {1}
    assert {row["period"] for row in succeeded} <= set(per_period)
    assert set(per_period) <= {row["period"] for row in runs}
    assert {row["attempt"] for row in invoices} == {1}
    items = _table(url, "scheduler_items")
    assert Counter(row["key"] for row in items) == Counter(
        f"invoice:{period.isoformat()}" for period in per_period
    )
    # Two nodes of one fleet: both registered on the database, and only they held runs.
    # Not that both held some: one job is one node's share (`node/peers.py`), so that
    # node claims every period, and the other takes only what is left after HANDOFF_S
    # or a retry it wins the race for (one run here: attempt 1 all `a`, the three
    # retries `b`), which no rule guarantees.
    database = open_database(url)
    try:
        nodes = {row["id"]: row["name"] for row in rows(database, "scheduler_nodes")}
    finally:
        database.dispose()
    assert sorted(nodes.values()) == ["a", "b"]
    assert {row["holder"] for row in runs} <= set(nodes)
    listed = manage(url, "scheduler", "jobs")
    assert listed.returncode == 0, listed.stderr
    assert "invoice" in listed.stdout


def _postgres_schema(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """The scheduler's tables as the catalogue describes them: columns, indexes,
    constraints and the revision."""
    with psycopg.connect(url) as connection:
        columns = connection.execute(
            "SELECT table_name, column_name, data_type, is_nullable, column_default,"
            " is_generated, generation_expression, character_maximum_length"
            " FROM information_schema.columns"
            " WHERE table_schema = 'public' AND table_name LIKE 'scheduler\\_%'"
            " ORDER BY table_name, column_name"
        ).fetchall()
        indexes = connection.execute(
            "SELECT tablename, indexname, indexdef FROM pg_indexes"
            " WHERE schemaname = 'public' AND tablename LIKE 'scheduler\\_%' ORDER BY indexname"
        ).fetchall()
        constraints = connection.execute(
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)"
            " FROM pg_constraint WHERE conrelid::regclass::text LIKE 'scheduler\\_%'"
            " ORDER BY conname"
        ).fetchall()
        version = connection.execute("SELECT version_num FROM scheduler_alembic_version").fetchall()
    return {"columns": columns, "indexes": indexes, "constraints": constraints, "version": version}


def _sqlite_schema(path: Path) -> list[tuple[Any, ...]]:
    import sqlite3  # noqa: PLC0415

    with sqlite3.connect(path) as connection:
        found = connection.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master"
            " WHERE tbl_name LIKE 'scheduler\\_%' ESCAPE '\\' ORDER BY type, name"
        ).fetchall()
        found += connection.execute("SELECT version_num FROM scheduler_alembic_version").fetchall()
    connection.close()
    return found


@pytest.mark.postgres
def test_manage_py_migrate_makes_the_schema_scheduler_migrate_makes_on_postgres(
    tmp_path: Path,
) -> None:
    with postgres_database() as by_django, postgres_database() as by_scheduler:
        migrated = manage(by_django, "migrate", "--no-input")
        assert migrated.returncode == 0, migrated.stdout + migrated.stderr
        ran = run_command(["migrate"], tmp_path, SCHEDULER_DATABASE_URL=by_scheduler)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        schema = _postgres_schema(by_django)
        assert schema == _postgres_schema(by_scheduler)
        assert schema["version"] == [(migrate.head_revision(),)]
        assert len(schema["columns"]) > 50
        # Again: Django's migrations have nothing to do, nor have the scheduler's.
        again = manage(by_django, "migrate", "--no-input")
        assert again.returncode == 0, again.stderr
        assert f"Scheduler tables: at revision {migrate.head_revision()}, nothing to do" in (
            again.stdout
        )
        checked = manage(by_django, "scheduler", "migrate", "--check")
        assert (checked.returncode, checked.stdout) == (
            0,
            f"current: the schema is at revision {migrate.head_revision()}\n",
        )


def test_manage_py_migrate_makes_the_schema_scheduler_migrate_makes_on_sqlite(
    tmp_path: Path,
) -> None:
    by_django, by_scheduler = tmp_path / "django.sqlite3", tmp_path / "scheduler.sqlite3"
    migrated = manage(f"sqlite:///{by_django}", "migrate", "--no-input")
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    ran = run_command(["migrate"], tmp_path, SCHEDULER_DATABASE_URL=f"sqlite:///{by_scheduler}")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    schema = _sqlite_schema(by_django)
    assert schema == _sqlite_schema(by_scheduler)
    assert schema[-1] == (migrate.head_revision(),)
    # The Django tables are there too, beside the scheduler's.
    assert "billing_invoice" in _sqlite_tables(by_django)


def _sqlite_tables(path: Path) -> set[str]:
    import sqlite3  # noqa: PLC0415

    with sqlite3.connect(path) as connection:
        names = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    connection.close()
    return names


def _settings(tmp_path: Path, body: str) -> dict[str, str]:
    """A settings module over the example's, with `body` after its import (and the
    scheduler of this repository, as `manage` gives it, not whichever is installed)."""
    folder = tmp_path / "settings"
    folder.mkdir(parents=True)
    (folder / "broken_settings.py").write_text(f"from example.settings import *\n\n{body}\n")
    path = os.pathsep.join([str(folder), str(EXAMPLE), str(REPOSITORY)])
    return {"DJANGO_SETTINGS_MODULE": "broken_settings", "PYTHONPATH": path}


@pytest.mark.parametrize(
    ("body", "line"),
    [
        (
            'SCHEDULER = {"WORKER": 4}',
            "error: settings.SCHEDULER['WORKER']: unknown option (one of: CATCHUP_BUDGET,",
        ),
        (
            'DATABASES = {"default": {"ENGINE": "django.db.backends.dummy"}}',
            "error: DATABASES['default']['ENGINE']: django.db.backends.dummy is not supported;"
            " the scheduler runs on PostgreSQL or SQLite",
        ),
        (
            'SCHEDULER = {"DATABASE": "reports"}',
            "error: settings.SCHEDULER['DATABASE']: no database 'reports' in DATABASES"
            " (one of: default)",
        ),
        (
            'SCHEDULER = {"JOBS": "billing.jobs"}',
            "error: settings.SCHEDULER['JOBS']: must be a list of module names, e.g."
            " ['billing.jobs']",
        ),
    ],
)
def test_a_mistake_in_the_settings_is_one_line_naming_the_setting(
    tmp_path: Path, body: str, line: str
) -> None:
    database = tmp_path / "db.sqlite3"
    shown = manage(f"sqlite:///{database}", "scheduler", "jobs", env=_settings(tmp_path, body))
    assert shown.returncode == 2, shown.stdout + shown.stderr
    assert shown.stderr.startswith(line), shown.stderr
    assert shown.stderr.count("\n") == 1
    assert "Traceback" not in shown.stderr
    assert not database.exists()  # nothing was written


def test_help_and_options_come_from_the_scheduler_cli(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    shown = manage(url, "scheduler", "--help")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("Usage: manage.py scheduler [OPTIONS] COMMAND [ARGS]...")
    for command in ("run", "migrate", "jobs", "runs", "check", "schedules"):
        assert f"\n  {command} " in shown.stdout
    # A flag on the command line wins over the settings (SCHEDULER sets WORKERS to 4).
    wrong = manage(url, "scheduler", "run", "--workers", "0")
    assert wrong.returncode == 2
    assert "--workers" in wrong.stderr


def test_migrate_says_what_it_cannot_do_in_one_line(tmp_path: Path) -> None:
    """An in-memory SQLite database (Django's test database by default) is left without
    the scheduler's tables, said in one line; an engine the scheduler cannot use fails
    `migrate` with one line, as Django's own errors do."""
    memory = _settings(
        tmp_path / "memory",
        'DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}',
    )
    skipped = manage("sqlite:///unused", "migrate", "--no-input", env=memory)
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert (
        "  Scheduler tables: skipped, an in-memory SQLite database cannot hold them\n"
        in skipped.stdout
    )
    explicit = _settings(tmp_path / "explicit", 'SCHEDULER = {"DATABASE_URL": "mysql://x/y"}')
    refused = manage(f"sqlite:///{tmp_path / 'db.sqlite3'}", "migrate", "--no-input", env=explicit)
    assert refused.returncode == 1
    assert refused.stderr == (
        "CommandError: --database-url: unsupported database 'mysql' (use sqlite or postgresql)\n"
    )


def test_call_command_runs_a_scheduler_command_and_raises_on_its_failure(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    assert manage(url, "migrate", "--no-input").returncode == 0
    script = (
        "from django.core.management import CommandError, call_command\n"
        "call_command('scheduler', 'migrate', '--check')\n"
        "try:\n"
        "    call_command('scheduler', 'runs', '--status', 'nope')\n"
        "except CommandError as error:\n"
        "    print('refused', error, error.returncode)\n"
    )
    shown = manage(url, "shell", "-v", "0", "-c", script)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert shown.stdout == (
        f"current: the schema is at revision {migrate.head_revision()}\n"
        "refused scheduler runs --status nope: exit status 2 2\n"
    )
    assert shown.stderr.startswith("error: manage.py scheduler runs: Invalid value for '--status'")


def test_the_app_wraps_every_call_in_djangos_connection_handling_at_start_up(
    tmp_path: Path,
) -> None:
    """Nothing but `INSTALLED_APPS`: Django's set-up registers `fresh_connections`
    around every job call, once, in the scheduler this repository holds."""
    script = (
        "import scheduler\n"
        "from scheduler import call_hooks\n"
        "print(scheduler.__file__)\n"
        "print([f'{hook.__module__}.{hook.__qualname__}' for hook in call_hooks.registered()])\n"
    )
    shown = manage(f"sqlite:///{tmp_path / 'db.sqlite3'}", "shell", "-v", "0", "-c", script)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert shown.stdout.splitlines() == [
        str(REPOSITORY / "scheduler" / "__init__.py"),
        "['scheduler.django.connections.fresh_connections']",
    ]


def test_the_examples_own_test_runs_its_invoice_job_under_the_virtual_clock(
    tmp_path: Path,
) -> None:
    """`manage.py test billing`: examples/django/billing/tests.py runs the invoice job
    with `scheduler.testing`, Django's default database moved to the harness's file, so
    that `ctx.once(key, connection=connection)` records in the database the node runs
    on (the recipe of the Django guide's "Test your jobs")."""
    tested = manage(f"sqlite:///{tmp_path / 'db.sqlite3'}", "test", "billing", "-v", "2")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "test_each_period_is_invoiced_once_even_when_it_is_retried" in tested.stderr
    assert "\nRan 1 test in " in tested.stderr
    assert tested.stderr.rstrip().splitlines()[-2:] == [
        "OK",
        f"Destroying test database for alias 'default' ('{tmp_path / 'test-db.sqlite3'}')...",
    ]
