"""A stand-in for your application's database code: an engine and a few tables.

The examples keep their tables (prefixed `example_`) in the scheduler's own database,
as an application would keep its tables next to `scheduler_*`: that is what lets
`ctx.once(key, connection=...)` commit the item record with the job's own writes.
"""

from __future__ import annotations

import os
from functools import cache

from sqlalchemy import Column, DateTime, Engine, Integer, MetaData, String, Table, create_engine

metadata = MetaData()

customers = Table(
    "example_customers",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("email", String(200), nullable=False),
    Column("monthly_cents", Integer, nullable=False),
)

invoices = Table(
    "example_invoices",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("customer_id", Integer, nullable=False),
    Column("month", String(7), nullable=False),
    Column("amount_cents", Integer, nullable=False),
)

sessions = Table(
    "example_sessions",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("expires_at", DateTime(timezone=True), nullable=False, index=True),
)


@cache
def engine() -> Engine:
    """Your application's engine; here, on the database the scheduler uses: the scheduler
    sets SCHEDULER_DATABASE_URL to it for its job code, given as a flag or a variable."""
    url = os.environ.get("SCHEDULER_DATABASE_URL", "sqlite:///scheduler.db")
    for scheme in ("postgresql://", "postgres://"):
        url = url.replace(scheme, "postgresql+psycopg://", 1) if url.startswith(scheme) else url
    created = create_engine(url, connect_args={"timeout": 30} if url.startswith("sqlite") else {})
    metadata.create_all(created)  # idempotent: creates only the tables that are missing
    return created
