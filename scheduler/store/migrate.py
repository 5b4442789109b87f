"""Alembic, driven from code: `scheduler migrate` (also `--check` and `--sql`) and the
schema check at start-up.

The scheduler records its revision in a version table of its own,
`scheduler_alembic_version`, so that it shares a database with an application that
uses Alembic too (whose revisions live in `alembic_version`). Versions up to 0.1.0
wrote to `alembic_version`; such a database is still read as it is, and `upgrade`
moves the revision over in one transaction (see `adopt_legacy_revision`).
"""

from __future__ import annotations

import ast
import functools
import io
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import (
    Column,
    Connection,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    create_engine,
    delete,
    func,
    inspect,
    select,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.schema import CreateTable, DropTable
from sqlalchemy.sql.expression import ClauseElement, Executable

from scheduler.errors import SchemaOutdatedError

if TYPE_CHECKING:  # Alembic is imported only to migrate: a node's start-up needs none of it
    from alembic.config import Config
from scheduler.store.database import Database, open_database, parse_database_url
from scheduler.store.schema import VERSION_TABLE, runs

# Where versions up to 0.1.0 recorded the revision: Alembic's default, which an
# application's own migrations use too.
LEGACY_VERSION_TABLE = "alembic_version"
# Serialises two `scheduler migrate` started at once on PostgreSQL ("scheduler" in ASCII).
MIGRATE_LOCK_KEY = 0x7363686564756C


def migrations_path() -> Path:
    """Inside an installed wheel the migrations ship as `scheduler/_migrations`;
    in a source checkout they are the top-level `migrations/` folder."""
    packaged = Path(str(resources.files("scheduler"))) / "_migrations"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(database: Database) -> Config:
    from alembic.config import Config  # noqa: PLC0415 - only when migrating

    config = Config()
    config.set_main_option("script_location", str(migrations_path()))
    config.attributes["engine"] = database.engine
    return config


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


def version_table(name: str = VERSION_TABLE) -> Table:
    """A version table as Alembic creates it."""
    return Table(
        name,
        MetaData(),
        Column("version_num", String(32), nullable=False),
        PrimaryKeyConstraint("version_num", name=f"{name}_pkc"),
    )


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
    with database.engine.connect() as connection:
        current = _recorded(connection)
        if current is not None:
            return SchemaState(current, head_revision())
        legacy = _legacy_revisions(connection)
    return SchemaState(max(legacy) if legacy else None, head_revision(), legacy=bool(legacy))


def current_revision(database: Database) -> str | None:
    return schema_state(database).current


def _recorded(connection: Connection) -> str | None:
    """The revision in our version table, as Alembic reads it (one row, or none)."""
    if not inspect(connection).has_table(VERSION_TABLE):
        return None
    table = version_table()
    return connection.execute(select(table.c.version_num)).scalars().first()


def _legacy_revisions(connection: Connection) -> list[str]:
    """Our revisions in `alembic_version`. A revision id such as 0003 could be an
    application's too, so it counts as ours only where the scheduler's tables exist."""
    tables = set(inspect(connection).get_table_names())
    if LEGACY_VERSION_TABLE not in tables or runs.name not in tables:
        return []
    legacy = version_table(LEGACY_VERSION_TABLE)
    recorded = connection.execute(select(legacy.c.version_num)).scalars()
    return sorted(set(recorded) & known_revisions())


def adopt_legacy_revision(database: Database) -> bool:
    """Move our revision from `alembic_version` to our own table, in one transaction.

    Rows of an application's revisions stay where they are; a table left empty, that
    held only ours, is dropped. True if something moved.
    """
    with database.transaction() as connection:
        if database.job_locks:
            connection.execute(select(func.pg_advisory_xact_lock(MIGRATE_LOCK_KEY)))
        statements = _adoption(connection)
        for statement in statements:
            connection.execute(statement)
    return bool(statements)


def _adoption(connection: Connection) -> list[Executable]:
    """The statements that move our revision over (none when there is nothing to move)."""
    ours = _legacy_revisions(connection)
    if not ours:
        return []
    legacy, own = version_table(LEGACY_VERSION_TABLE), version_table()
    statements: list[Executable] = []
    if _recorded(connection) is None:
        if not inspect(connection).has_table(VERSION_TABLE):
            statements.append(CreateTable(own))
        statements.append(own.insert().values(version_num=max(ours)))
    statements.append(delete(legacy).where(legacy.c.version_num.in_(ours)))
    others = connection.execute(
        select(func.count()).select_from(legacy).where(legacy.c.version_num.not_in(ours))
    ).scalar_one()
    if others == 0:
        statements.append(DropTable(legacy))
    return statements


def upgrade(database: Database, revision: str = "head") -> None:
    adopt_legacy_revision(database)
    from alembic import command  # noqa: PLC0415 - only when migrating

    command.upgrade(alembic_config(database), revision)


def downgrade(database: Database, revision: str) -> None:
    from alembic import command  # noqa: PLC0415 - only when migrating

    command.downgrade(alembic_config(database), revision)


def offline_sql(database: Database, state: SchemaState) -> str:
    """The SQL script `scheduler migrate` would run, for a DBA to review and apply, from
    the revision recorded (`state`); writes nothing. Moves a legacy revision over first."""
    if state.current is not None and state.current not in known_revisions():
        raise SchemaOutdatedError(_newer_than_known(state.current, state.head).split(": ", 1)[1])
    if state.up_to_date:
        return f"-- the schema is at revision {state.head}: nothing to do\n"
    dialect = database.engine.dialect
    adoption: list[Executable] = []
    if state.legacy:
        with database.engine.connect() as connection:
            adoption = _adoption(connection)
    script = "".join(_literal_sql(statement, dialect) for statement in adoption)
    if state.current != state.head:
        from alembic import command  # noqa: PLC0415 - only when migrating

        config = alembic_config(database)
        buffer = io.StringIO()
        config.output_buffer = buffer
        config.attributes["offline_dialect"] = dialect.name
        start = f"{state.current}:" if state.current else ""
        command.upgrade(config, f"{start}head", sql=True)
        script += buffer.getvalue()
    return script


def _literal_sql(statement: Executable, dialect: Dialect) -> str:
    assert isinstance(statement, ClauseElement)
    compiled = statement.compile(dialect=dialect, compile_kwargs={"literal_binds": True})
    return f"{str(compiled).strip()};\n\n"


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


def _newer_than_known(current: str, head: str) -> str:
    return (
        f"unknown: database schema revision {current} is newer than this scheduler knows "
        f"(head {head}); upgrade the scheduler"
    )


def inspect_url(database_url: str) -> tuple[Database, SchemaState]:
    """The database and its schema state for `--check` and `--sql`, which write nothing:
    a SQLite file that does not exist yet is not created, just reported as empty."""
    url = parse_database_url(database_url)
    if url.get_backend_name() == "sqlite" and not Path(url.database or "").exists():
        return Database(create_engine(url)), SchemaState(None, head_revision())
    database = open_database(database_url, connections=2)
    return database, schema_state(database)
