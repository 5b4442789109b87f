"""Databases of their own for tests: created on the PostgreSQL test server, dropped after."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

POSTGRES_ADMIN_URL = os.environ.get(
    "SCHEDULER_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def admin_connection() -> psycopg.Connection[tuple[object, ...]]:
    try:
        return psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as error:
        pytest.fail(
            f"PostgreSQL is not reachable at {POSTGRES_ADMIN_URL} ({error}); "
            "start it or set SCHEDULER_TEST_POSTGRES_URL",
            pytrace=False,
        )


def url_for(database_name: str) -> str:
    base, _, _ = POSTGRES_ADMIN_URL.rpartition("/")
    return f"{base}/{database_name}"


@contextmanager
def postgres_database(template: str | None = None) -> Iterator[str]:
    """A new database (a copy of `template` if given); its URL; dropped on exit."""
    name = f"scheduler_test_{uuid.uuid4().hex[:12]}"
    clause = f' TEMPLATE "{template}"' if template else ""
    with admin_connection() as admin:
        admin.execute(f'CREATE DATABASE "{name}"{clause}')
    try:
        yield url_for(name)
    finally:
        with admin_connection() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
