"""An application that uses Alembic in the same database as the scheduler: each keeps its
own version table, in either order of migrating, and a database that an older scheduler
migrated (its revision in `alembic_version`) moves over in one step."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from alembic import command

from scheduler.store import migrate
from scheduler.store.database import open_database
from tests.acceptance.processes import environment, run_command
from tests.sql import table_names

pytestmark = pytest.mark.slow
ALEMBIC = str(Path(sys.executable).parent / "alembic")
HEAD = migrate.head_revision()
APP_ENV = """
from alembic import context
from sqlalchemy import create_engine

with create_engine(context.config.get_main_option("sqlalchemy.url")).connect() as connection:
    context.configure(connection=connection)
    with context.begin_transaction():
        context.run_migrations()
    connection.commit()
"""
APP_REVISIONS = {
    "a1f00d": (
        None,
        'op.create_table("app_orders", sa.Column("id", sa.Integer, primary_key=True))',
    ),
    "b2cafe": ("a1f00d", 'op.add_column("app_orders", sa.Column("note", sa.String(80)))'),
}


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database, as an application that has not migrated yet has it."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'app.db'}"
    else:
        yield request.getfixturevalue("empty_postgres_url")


@pytest.fixture
def app(tmp_path: Path, url: str) -> Path:
    """The application's own Alembic environment: two revisions of an `app_orders` table."""
    folder = tmp_path / "app"
    versions = folder / "migrations" / "versions"
    versions.mkdir(parents=True)
    (folder / "migrations" / "env.py").write_text(APP_ENV)
    engine_url = url.replace("postgresql://", "postgresql+psycopg://", 1)
    (folder / "alembic.ini").write_text(
        f"[alembic]\nscript_location = %(here)s/migrations\nsqlalchemy.url = {engine_url}\n"
    )
    for revision, (down, operation) in APP_REVISIONS.items():
        (versions / f"{revision}.py").write_text(
            "import sqlalchemy as sa\nfrom alembic import op\n\n"
            f"revision = {revision!r}\ndown_revision = {down!r}\n"
            "branch_labels = None\ndepends_on = None\n\n\n"
            f"def upgrade():\n    {operation}\n\n\ndef downgrade():\n    pass\n"
        )
    return folder


def app_upgrade(app: Path, revision: str = "head") -> None:
    done = subprocess.run(
        [ALEMBIC, "upgrade", revision],
        cwd=app,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def scheduler(app: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    result = run_command([*args, "--database-url", url], app)
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result


def versions(url: str) -> dict[str, list[str]]:
    """Each version table that exists, with the revisions it records."""
    database = open_database(url)
    try:
        with database.transaction() as connection:
            tables = table_names(connection)
            return {
                name: sorted(connection.execute(f"SELECT version_num FROM {name}").scalars())
                for name in ("alembic_version", "scheduler_alembic_version")
                if name in tables
            }
    finally:
        database.dispose()


def assert_both_current(app: Path, url: str) -> None:
    assert versions(url) == {"alembic_version": ["b2cafe"], "scheduler_alembic_version": [HEAD]}
    checked = scheduler(app, url, "migrate", "--check")
    assert (checked.returncode, checked.stdout) == (
        0,
        f"current: the schema is at revision {HEAD}\n",
    )
    listed = scheduler(app, url, "jobs")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("no jobs registered yet")


def test_the_app_migrates_first_then_the_scheduler(app: Path, url: str) -> None:
    app_upgrade(app, "a1f00d")
    migrated = scheduler(app, url, "migrate", "--log-format", "json")
    assert migrated.returncode == 0, migrated.stderr
    assert f'"after": "{HEAD}"' in migrated.stdout
    app_upgrade(app)
    assert_both_current(app, url)


def test_the_scheduler_migrates_first_then_the_app(app: Path, url: str) -> None:
    assert scheduler(app, url, "migrate").returncode == 0
    app_upgrade(app)
    assert_both_current(app, url)


def _legacy(url: str, revision: str, *, with_app_row: bool) -> None:
    """The database as a scheduler up to 0.1.0 left it: its revision in alembic_version."""
    database = open_database(url, must_exist=False)
    try:
        migrate.upgrade(database, revision)
        with database.transaction() as connection:
            connection.execute("ALTER TABLE scheduler_alembic_version RENAME TO alembic_version")
            if database.is_postgres:  # as Alembic named it there
                connection.execute(
                    "ALTER TABLE alembic_version "
                    "RENAME CONSTRAINT scheduler_alembic_version_pkc TO alembic_version_pkc"
                )
            if with_app_row:
                connection.execute("INSERT INTO alembic_version VALUES ('a1f00d')")
                connection.execute("CREATE TABLE app_orders (id INTEGER PRIMARY KEY)")
    finally:
        database.dispose()


@pytest.mark.parametrize("revision", ["0003", HEAD])
@pytest.mark.parametrize("with_app_row", [False, True])
def test_a_revision_an_older_scheduler_kept_in_alembic_version_moves_over(
    app: Path, url: str, revision: str, with_app_row: bool
) -> None:
    _legacy(url, revision, with_app_row=with_app_row)
    before = versions(url)
    assert before == {"alembic_version": sorted([revision, *(["a1f00d"] * with_app_row)])}

    listed = scheduler(app, url, "jobs")
    if revision == HEAD:
        assert listed.returncode == 0, "the old place is still read before the move"
    else:
        assert listed.returncode == 2
        assert f"at revision {revision}, this scheduler needs {HEAD}" in listed.stderr
    checked = scheduler(app, url, "migrate", "--check")
    assert checked.returncode == 1
    (line,) = checked.stdout.splitlines()
    assert line.startswith("behind: "), line
    assert "alembic_version" in line
    script = scheduler(app, url, "migrate", "--sql")
    assert script.returncode == 0, script.stderr
    assert "CREATE TABLE scheduler_alembic_version" in script.stdout
    assert ("DROP TABLE alembic_version" in script.stdout) is not with_app_row
    assert versions(url) == before, "--sql writes nothing"

    assert scheduler(app, url, "migrate").returncode == 0
    after = versions(url)
    assert after.pop("scheduler_alembic_version") == [HEAD]
    assert after == ({"alembic_version": ["a1f00d"]} if with_app_row else {})
    if with_app_row:
        app_upgrade(app)
        assert_both_current(app, url)


def test_migrate_sql_is_the_script_a_dba_applies(app: Path, url: str) -> None:
    app_upgrade(app)
    script = scheduler(app, url, "migrate", "--sql")
    assert script.returncode == 0, script.stderr
    assert "CREATE TABLE scheduler_runs" in script.stdout
    assert versions(url) == {"alembic_version": ["b2cafe"]}, "--sql writes nothing"
    _apply(url, script.stdout)
    assert_both_current(app, url)
    again = scheduler(app, url, "migrate", "--sql")
    assert again.stdout == f"-- the schema is at revision {HEAD}: nothing to do\n"


def test_an_upgrade_script_starts_from_the_recorded_revision(app: Path, url: str) -> None:
    app_upgrade(app)
    database = open_database(url, must_exist=False)
    migrate.upgrade(database, "0003")
    database.dispose()
    script = scheduler(app, url, "migrate", "--sql").stdout
    assert "CREATE TABLE scheduler_runs" not in script
    assert "scheduler_items" in script
    _apply(url, script)
    assert_both_current(app, url)


def _apply(url: str, script: str) -> None:
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as connection:
            connection.executescript(script)
    else:
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(script.encode())


def test_check_of_a_missing_sqlite_file_creates_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'later.db'}"
    checked = run_command(["migrate", "--check", "--database-url", url], tmp_path)
    assert checked.returncode == 1
    assert checked.stdout.startswith("behind: no scheduler schema yet")
    assert (
        "CREATE TABLE scheduler_alembic_version"
        in run_command(["migrate", "--sql", "--database-url", url], tmp_path).stdout
    )
    assert list(tmp_path.iterdir()) == []


def test_the_apps_tables_are_not_the_schedulers_to_compare(app: Path, url: str) -> None:
    app_upgrade(app)
    database = open_database(url, must_exist=False)
    try:
        migrate.upgrade(database)
        assert migrate.schema_state(database).up_to_date
        with migrate.alembic_config(database) as config:
            command.check(config)  # app_orders is not a diff
    finally:
        database.dispose()


def test_a_revision_newer_than_this_scheduler_is_one_line(app: Path, url: str) -> None:
    assert scheduler(app, url, "migrate").returncode == 0
    database = open_database(url)
    try:
        with database.transaction() as connection:
            connection.execute("UPDATE scheduler_alembic_version SET version_num = '9999'")
    finally:
        database.dispose()
    for args in (["migrate"], ["migrate", "--check"], ["migrate", "--sql"], ["jobs"]):
        refused = scheduler(app, url, *args)
        assert refused.returncode == 2, args
        (line,) = refused.stderr.splitlines()
        assert "revision 9999 is newer than this scheduler knows" in line, line
        assert line.startswith("error: ")
