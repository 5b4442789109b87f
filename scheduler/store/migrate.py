"""Alembic, driven from code: `scheduler migrate` and the schema check at start-up."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from scheduler.errors import SchemaOutdatedError
from scheduler.store.database import Database


def migrations_path() -> Path:
    """Inside an installed wheel the migrations ship as `scheduler/_migrations`;
    in a source checkout they are the top-level `migrations/` folder."""
    packaged = Path(str(resources.files("scheduler"))) / "_migrations"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(database: Database) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_path()))
    config.attributes["engine"] = database.engine
    return config


def head_revision(database: Database) -> str:
    head = ScriptDirectory.from_config(alembic_config(database)).get_current_head()
    assert head is not None, "the migrations folder has no revisions"
    return head


def current_revision(database: Database) -> str | None:
    with database.engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def upgrade(database: Database, revision: str = "head") -> None:
    command.upgrade(alembic_config(database), revision)


def downgrade(database: Database, revision: str) -> None:
    command.downgrade(alembic_config(database), revision)


def require_current_schema(database: Database) -> None:
    """Refuse to run against an empty, older or unknown schema, naming the fix."""
    current, head = current_revision(database), head_revision(database)
    if current == head:
        return
    script = ScriptDirectory.from_config(alembic_config(database))
    if current is None:
        raise SchemaOutdatedError(
            f"database {database.display_url} has no scheduler schema; run `scheduler migrate`"
        )
    known = {revision.revision for revision in script.walk_revisions()}
    if current not in known:
        raise SchemaOutdatedError(
            f"database schema revision {current} is newer than this scheduler knows "
            f"(head {head}); upgrade the scheduler"
        )
    raise SchemaOutdatedError(
        f"database schema is at revision {current}, this scheduler needs {head}; "
        "run `scheduler migrate`"
    )
