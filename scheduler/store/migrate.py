"""Alembic, driven from code: `scheduler migrate` (also `--check` and `--sql`) and the
schema check at start-up.

The scheduler records its revision in a version table of its own,
`scheduler_alembic_version`, so that it shares a database with an application that
uses Alembic too (whose revisions live in `alembic_version`). Versions up to 0.1.0
wrote to `alembic_version`; such a database is still read as it is, and `upgrade`
moves the revision over (see `adopt_legacy_revision`).

An upgrade is one transaction under the migration lock (`migrating`): replicas started
together with `--migrate`, or beside `scheduler migrate`, queue on it, and each reads the
revision again once it holds the lock, so that only the first creates anything.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import io
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scheduler.errors import SchemaOutdatedError
from scheduler.store.connection import ForeignConnection
from scheduler.store.database import Connection, Database, open_database, parse_database_url
from scheduler.store.urls import DatabaseURL

if TYPE_CHECKING:  # Alembic and SQLAlchemy are imported only to migrate
    from collections.abc import Iterator

    from alembic.config import Config
    from sqlalchemy import Engine

# The scheduler's own Alembic version table: an application sharing the database keeps
# `alembic_version` for its own revisions (store/schema.py names it for Alembic too).
VERSION_TABLE = "scheduler_alembic_version"
RUNS_TABLE = "scheduler_runs"
# Where versions up to 0.1.0 recorded the revision: Alembic's default, which an
# application's own migrations use too.
LEGACY_VERSION_TABLE = "alembic_version"
# Serialises migrating processes on PostgreSQL, held by the upgrade's transaction to its
# end ("schedul" in ASCII). SQLite's write lock (BEGIN IMMEDIATE) does the same there.
MIGRATE_LOCK_KEY = 0x7363686564756C


def migrations_path() -> Path:
    """Inside an installed wheel the migrations ship as `scheduler/_migrations`;
    in a source checkout they are the top-level `migrations/` folder."""
    packaged = Path(str(resources.files("scheduler"))) / "_migrations"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "migrations"


@contextlib.contextmanager
def alembic_config(database: Database) -> Iterator[Config]:
    """Alembic's configuration for this database, with an engine of its own (SQLAlchemy
    is loaded here, and only here), disposed when the block ends."""
    from alembic.config import Config  # noqa: PLC0415 - only when migrating

    engine = sqlalchemy_engine(database.url)
    config = Config()
    config.set_main_option("script_location", str(migrations_path()))
    config.attributes["engine"] = engine
    try:
        yield config
    finally:
        engine.dispose()


def sqlalchemy_engine(url: DatabaseURL) -> Engine:
    """A SQLAlchemy engine on the same database, for Alembic: on SQLite with the store's
    own settings (a busy timeout, WAL, BEGIN IMMEDIATE), so that a migration queues
    behind a running node's writes instead of failing."""
    from sqlalchemy import create_engine, event  # noqa: PLC0415 - only when migrating

    if url.is_postgres:
        return create_engine(url.sqlalchemy(), connect_args={"connect_timeout": 5})
    engine = create_engine(
        url.sqlalchemy(), connect_args={"timeout": 30, "check_same_thread": False}
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA busy_timeout = 30000")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = FULL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


@functools.cache
def _revisions() -> dict[str, str | None]:
    """Each revision of the migrations folder and the one before it, read from the
    scripts' own `revision` and `down_revision` without importing them (or Alembic,
    which a start-up check does not need; a unit test compares this with Alembic)."""
    found: dict[str, str | None] = {}
    for script in sorted((migrations_path() / "versions").glob("*.py")):
        names: dict[str, object] = {}
        for node in ast.parse(script.read_text()).body:
            targets: list[ast.expr]
            value: ast.expr | None
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign):
                targets, value = [node.target], node.value
            else:
                continue
            if not isinstance(value, ast.Constant):
                continue
            names |= {target.id: value.value for target in targets if isinstance(target, ast.Name)}
        revision, down = names.get("revision"), names.get("down_revision")
        if isinstance(revision, str):
            found[revision] = down if isinstance(down, str) else None
    return found


def known_revisions() -> frozenset[str]:
    return frozenset(_revisions())


def head_revision(database: Database | None = None) -> str:
    """The newest revision this version of the scheduler knows."""
    del database  # the head is the code's, whatever the database
    revisions = _revisions()
    heads = set(revisions) - {down for down in revisions.values() if down is not None}
    assert len(heads) == 1, f"the migrations folder has heads {sorted(heads)}"
    return heads.pop()


@dataclass(frozen=True)
class SchemaState:
    """Where the database's scheduler schema stands against this code."""

    current: str | None
    head: str
    # The revision is recorded in `alembic_version`, by a scheduler up to 0.1.0.
    legacy: bool = False

    @property
    def up_to_date(self) -> bool:
        return self.current == self.head and not self.legacy

    def describe(self) -> str:
        """One line for `scheduler migrate --check`."""
        if self.up_to_date:
            return f"current: the schema is at revision {self.head}"
        if self.current is None:
            return f"behind: no scheduler schema yet (head {self.head}); run `scheduler migrate`"
        if self.current not in known_revisions():
            return _newer_than_known(self.current, self.head)
        if self.current != self.head:
            where = f" (recorded in {LEGACY_VERSION_TABLE})" if self.legacy else ""
            return (
                f"behind: the schema is at revision {self.current}{where}, this scheduler "
                f"needs {self.head}; run `scheduler migrate`"
            )
        return (
            f"behind: the schema is at revision {self.head} but recorded in "
            f"{LEGACY_VERSION_TABLE}; run `scheduler migrate` to move it to {VERSION_TABLE}"
        )


def schema_state(database: Database) -> SchemaState:
    """Read the recorded revision, from our own version table or, for a database that
    an older scheduler migrated, from `alembic_version`. Reads only."""
    with database.autocommit() as connection:
        return _state(connection)


def _state(connection: Connection) -> SchemaState:
    current = _recorded(connection)
    if current is not None:
        return SchemaState(current, head_revision())
    legacy = _legacy_revisions(connection)
    return SchemaState(max(legacy) if legacy else None, head_revision(), legacy=bool(legacy))


def current_revision(database: Database) -> str | None:
    return schema_state(database).current


def _has_table(connection: Connection, name: str) -> bool:
    """A table of that name is visible (on PostgreSQL: on the search path)."""
    if connection.is_postgres:
        sql = "SELECT to_regclass(:name) IS NOT NULL"
    else:
        sql = "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = :name"
    return bool(connection.execute(sql, {"name": name}).scalar())


def _recorded(connection: Connection) -> str | None:
    """The revision in our version table, as Alembic reads it (one row, or none)."""
    if not _has_table(connection, VERSION_TABLE):
        return None
    found = connection.execute(f"SELECT version_num FROM {VERSION_TABLE}").scalar()
    return None if found is None else str(found)


def _legacy_revisions(connection: Connection) -> list[str]:
    """Our revisions in `alembic_version`. A revision id such as 0003 could be an
    application's too, so it counts as ours only where the scheduler's tables exist."""
    if not (_has_table(connection, LEGACY_VERSION_TABLE) and _has_table(connection, RUNS_TABLE)):
        return []
    recorded = connection.execute(f"SELECT version_num FROM {LEGACY_VERSION_TABLE}").scalars()
    return sorted(set(recorded) & known_revisions())


def adopt_legacy_revision(connection: Connection) -> bool:
    """Move our revision from `alembic_version` to our own table, in the connection's
    transaction (the upgrade's, under the migration lock).

    Rows of an application's revisions stay where they are; a table left empty, that
    held only ours, is dropped. True if something moved.
    """
    statements = _adoption(connection)
    for statement in statements:
        connection.execute(statement)
    return bool(statements)


def _adoption(connection: Connection) -> list[str]:
    """The statements that move our revision over (none when there is nothing to move).
    Revision ids are our own migrations' (known_revisions), written as literals so that
    `migrate --sql` can print the same statements."""
    ours = _legacy_revisions(connection)
    if not ours:
        return []
    listed = ", ".join(f"'{revision}'" for revision in ours)
    statements: list[str] = []
    if _recorded(connection) is None:
        if not _has_table(connection, VERSION_TABLE):
            statements.append(
                f"CREATE TABLE {VERSION_TABLE} (version_num VARCHAR(32) NOT NULL, "
                f"CONSTRAINT {VERSION_TABLE}_pkc PRIMARY KEY (version_num))"
            )
        statements.append(f"INSERT INTO {VERSION_TABLE} (version_num) VALUES ('{max(ours)}')")
    statements.append(f"DELETE FROM {LEGACY_VERSION_TABLE} WHERE version_num IN ({listed})")
    others = connection.execute(
        f"SELECT count(*) FROM {LEGACY_VERSION_TABLE} WHERE version_num NOT IN ({listed})"
    ).scalar()
    if others == 0:
        statements.append(f"DROP TABLE {LEGACY_VERSION_TABLE}")
    return statements


def upgrade(database: Database, revision: str = "head") -> str | None:
    """Apply the migrations up to `revision`; the revision found before. A schema already
    at the head is left as it is without loading Alembic (a node started with `--migrate`
    on a current schema loads no SQLAlchemy). Otherwise, under the migration lock: a
    legacy revision moved over, the revision read again (another process may have
    migrated while this one waited), then Alembic, all in one transaction."""
    state = schema_state(database)
    if revision == "head" and state.up_to_date:
        return state.current
    _refuse_unknown(state)
    from alembic import command  # noqa: PLC0415 - only when migrating

    with alembic_config(database) as config, migrating(config) as connection:
        adopt_legacy_revision(connection)
        state = _state(connection)
        _refuse_unknown(state)  # a newer scheduler may have migrated while this one waited
        if not (revision == "head" and state.up_to_date):
            command.upgrade(config, revision)
    return state.current


def downgrade(database: Database, revision: str) -> None:
    from alembic import command  # noqa: PLC0415 - only when migrating

    with alembic_config(database) as config, migrating(config):
        command.downgrade(config, revision)


@contextlib.contextmanager
def migrating(config: Config) -> Iterator[Connection]:
    """One transaction on a connection of the config's engine, holding the migration lock
    until it commits: PostgreSQL's advisory lock, SQLite's write lock (the engine begins
    with BEGIN IMMEDIATE). Alembic is handed the connection (`env.py` runs inside its
    transaction), and the store's statements go through it."""
    engine: Engine = config.attributes["engine"]
    with engine.connect() as raw, raw.begin():
        connection = ForeignConnection(raw, raw.dialect.name)
        if connection.is_postgres:
            connection.execute("SELECT pg_advisory_xact_lock(:key)", {"key": MIGRATE_LOCK_KEY})
        config.attributes["connection"] = raw
        try:
            yield connection
        finally:
            del config.attributes["connection"]


def offline_sql(database_url: str, state: SchemaState) -> str:
    """The SQL script `scheduler migrate` would run, for a DBA to review and apply, from
    the revision recorded (`state`); writes nothing. Moves a legacy revision over first."""
    _refuse_unknown(state)
    if state.up_to_date:
        return f"-- the schema is at revision {state.head}: nothing to do\n"
    adoption: list[str] = []
    if state.legacy:  # the database exists: it holds the legacy revision
        database = open_database(database_url, connections=1)
        try:
            with database.autocommit() as connection:
                adoption = _adoption(connection)
        finally:
            database.dispose()
    script = "".join(f"{statement};\n\n" for statement in adoption)
    if state.current != state.head:
        from alembic import command  # noqa: PLC0415 - only when migrating
        from alembic.config import Config  # noqa: PLC0415

        config = Config()
        config.set_main_option("script_location", str(migrations_path()))
        buffer = io.StringIO()
        config.output_buffer = buffer
        config.attributes["offline_dialect"] = parse_database_url(database_url).backend
        start = f"{state.current}:" if state.current else ""
        command.upgrade(config, f"{start}head", sql=True)
        script += buffer.getvalue()
    return script


def require_current_schema(database: Database) -> None:
    """Refuse to run against an empty, older or unknown schema, naming the fix. A
    revision recorded by an older scheduler in `alembic_version` is accepted."""
    state = schema_state(database)
    if state.current == state.head:
        return
    if state.current is None:
        raise SchemaOutdatedError(
            f"database {database.display_url} has no scheduler schema; run `scheduler migrate`"
        )
    if state.current not in known_revisions():
        raise SchemaOutdatedError(_newer_than_known(state.current, state.head).split(": ", 1)[1])
    raise SchemaOutdatedError(
        f"database schema is at revision {state.current}, this scheduler needs {state.head}; "
        "run `scheduler migrate`"
    )


def _refuse_unknown(state: SchemaState) -> None:
    """A revision this scheduler does not know is a newer scheduler's: refused in one line
    (Alembic would fail on it with a traceback), never migrated from."""
    if state.current is not None and state.current not in known_revisions():
        raise SchemaOutdatedError(_newer_than_known(state.current, state.head).split(": ", 1)[1])


def _newer_than_known(current: str, head: str) -> str:
    return (
        f"unknown: database schema revision {current} is newer than this scheduler knows "
        f"(head {head}); upgrade the scheduler"
    )


def inspect_url(database_url: str) -> SchemaState:
    """The schema state for `--check` and `--sql`, which write nothing: a SQLite file
    that does not exist yet is not created, just reported as empty."""
    url = parse_database_url(database_url)
    if not url.is_postgres and not Path(url.path).exists():
        return SchemaState(None, head_revision())
    database = open_database(database_url, connections=2)
    try:
        return schema_state(database)
    finally:
        database.dispose()
