"""The databases the scheduler supports: PostgreSQL 13 or later, SQLite 3.35 or later
(the store's claims use RETURNING). An older one is refused in one line when the database
is opened; this machine's (PostgreSQL 15, SQLite 3.40) are read and let through."""

from __future__ import annotations

import sqlite3

import pytest

from scheduler.store import database as store_database
from scheduler.store.database import Database, unsupported


def test_this_machines_database_is_read_and_supported(database: Database) -> None:
    found = store_database._server_version(database)
    if database.is_postgres:
        assert found[0] >= 13
    else:
        assert found == sqlite3.sqlite_version_info
    assert unsupported(database.is_postgres, found) is None


@pytest.mark.parametrize(
    ("postgres", "version", "refused"),
    [
        (
            True,
            (12, 22),
            "PostgreSQL 12.22 is not supported: the scheduler needs PostgreSQL 13 or later",
        ),
        (True, (13, 0), None),
        (True, (17, 2), None),
        (True, (18, 0), None),
        (
            False,
            (3, 34, 1),
            "SQLite 3.34.1 is not supported: the scheduler needs SQLite 3.35 or later"
            " (Python's sqlite3 module is built against it)",
        ),
        (False, (3, 35, 0), None),
        (False, (3, 46, 1), None),
    ],
)
def test_an_older_database_is_refused_in_one_line(
    postgres: bool, version: tuple[int, ...], refused: str | None
) -> None:
    assert unsupported(postgres, version) == refused
