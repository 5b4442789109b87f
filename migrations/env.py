"""Alembic environment: the engine comes from `scheduler migrate`, or from -x url=… ."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Engine, create_engine

from scheduler.store.schema import metadata

config = context.config


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


def run_migrations_online() -> None:
    engine = _engine()
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=metadata,
            render_as_batch=connection.dialect.name == "sqlite",
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()


if context.is_offline_mode():
    raise SystemExit("offline (SQL script) migrations are not supported")
run_migrations_online()
