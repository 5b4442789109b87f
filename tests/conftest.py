"""Real databases for every test: a migrated PostgreSQL template cloned per test,
and a migrated SQLite file copied per test."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from scheduler.store import migrate
from scheduler.store.database import Database, open_database

POSTGRES_ADMIN_URL = os.environ.get(
    "SCHEDULER_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def _admin() -> psycopg.Connection[tuple[object, ...]]:
    try:
        return psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as error:
        pytest.fail(
            f"PostgreSQL is not reachable at {POSTGRES_ADMIN_URL} ({error}); "
            "start it or set SCHEDULER_TEST_POSTGRES_URL",
            pytrace=False,
        )


def _url_for(database_name: str) -> str:
    base, _, _ = POSTGRES_ADMIN_URL.rpartition("/")
    return f"{base}/{database_name}"


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    name = f"scheduler_template_{uuid.uuid4().hex[:8]}"
    with _admin() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    database = open_database(_url_for(name), must_exist=False)
    migrate.upgrade(database)
    database.dispose()
    yield name
    with _admin() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def postgres_url(postgres_template: str) -> Iterator[str]:
    """A fresh, migrated database of its own for one test."""
    name = f"scheduler_test_{uuid.uuid4().hex[:12]}"
    with _admin() as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{postgres_template}"')
    yield _url_for(name)
    with _admin() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def empty_postgres_url() -> Iterator[str]:
    """A database with no scheduler schema at all."""
    name = f"scheduler_empty_{uuid.uuid4().hex[:12]}"
    with _admin() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield _url_for(name)
    with _admin() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "template.db"
    database = open_database(f"sqlite:///{path}", must_exist=False)
    migrate.upgrade(database)
    database.dispose()
    return path


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    path = tmp_path / "scheduler.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest) -> str:
    """Run the test once on each backend."""
    fixture = "sqlite_url" if request.param == "sqlite" else "postgres_url"
    url: str = request.getfixturevalue(fixture)
    return url


@pytest.fixture
def database(database_url: str) -> Iterator[Database]:
    opened = open_database(database_url)
    yield opened
    opened.dispose()
