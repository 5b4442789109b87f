"""Plain SQL for tests that write rows as a node would have left them, or read rows back:
through the store's own connection, so that instants are kept and read as the store
keeps them."""

from __future__ import annotations

from typing import Any

from scheduler.store.database import Connection, Database


def insert(connection: Connection, table: str, **values: Any) -> None:
    """One row of `table` with these column values."""
    columns = ", ".join(values)
    placeholders = ", ".join(f":{name}" for name in values)
    connection.execute(f"INSERT INTO {table} ({columns}) VALUES ({placeholders})", values)


def update(connection: Connection, table: str, where: dict[str, Any], **values: Any) -> int:
    """Set `values` on the rows of `table` whose columns equal `where`; how many."""
    assignments = ", ".join(f"{name} = :set_{name}" for name in values)
    conditions = " AND ".join(f"{name} = :where_{name}" for name in where) or "TRUE"
    parameters = {f"set_{name}": value for name, value in values.items()}
    parameters |= {f"where_{name}": value for name, value in where.items()}
    statement = f"UPDATE {table} SET {assignments} WHERE {conditions}"
    return connection.execute(statement, parameters).rowcount


def rows(
    database: Database, table: str, order_by: str | None = None, **where: Any
) -> list[dict[str, Any]]:
    """Every row of `table` whose columns equal `where`, as mappings."""
    conditions = " AND ".join(f"{name} = :{name}" for name in where) or "TRUE"
    order = f" ORDER BY {order_by}" if order_by else ""
    with database.transaction() as connection:
        found = connection.execute(f"SELECT * FROM {table} WHERE {conditions}{order}", where)
        return found.mappings()


def table_names(connection: Connection) -> set[str]:
    """The tables of the database (on PostgreSQL: of the current schema), views aside."""
    if connection.is_postgres:
        sql = (
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
        )
    else:
        sql = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    return set(connection.execute(sql).scalars())


def began_at(database: Database, run_id: str, moment: Any) -> None:
    """Date the run's start and its holder's word that the body began to `moment`.
    Tests write periods as fixed instants of the past; overlap skips a period only
    behind a body said to have begun by the period's instant, so a test of a skip dates
    its running body back to its period."""
    with database.transaction() as connection:
        changed = update(
            connection, "scheduler_runs", {"id": run_id}, started_at=moment, began_at=moment
        )
        assert changed == 1
