"""Alembic environment: the connection (inside its transaction, under the migration
lock) or the engine comes from `scheduler migrate`, or the URL from -x url=… .

The revision is kept in `scheduler_alembic_version`, not Alembic's default
`alembic_version`, which belongs to the application when it uses Alembic too; and
only `scheduler_*` tables are compared with the metadata, so an application's tables
in the same database are not taken for tables to drop.
"""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy import Connection, Engine, create_engine

from scheduler.store.schema import VERSION_TABLE, metadata

config = context.config


def _ours(name: str | None, type_: str, _parent: Any) -> bool:
    return type_ != "table" or bool(name and name.startswith("scheduler_"))


def _engine() -> Engine:
    engine = config.attributes.get("engine")
    if isinstance(engine, Engine):
        return engine
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url"
    )
    if not url:
        raise SystemExit(
            "give the database with: alembic -x url=sqlite:///scheduler.db upgrade head"
        )
    return create_engine(url)


def run_migrations_offline() -> None:
    """`scheduler migrate --sql`: the script for the dialect given, no connection."""
    dialect = config.attributes.get("offline_dialect") or _engine().dialect.name
    context.configure(
        dialect_name=dialect,
        target_metadata=metadata,
        literal_binds=True,
        version_table=VERSION_TABLE,
        include_name=_ours,
        render_as_batch=dialect == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_on(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        version_table=VERSION_TABLE,
        include_name=_ours,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    given = config.attributes.get("connection")
    if isinstance(given, Connection):  # its transaction is the caller's to commit
        _run_on(given)
        return
    with _engine().connect() as connection:
        _run_on(connection)
        connection.commit()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
