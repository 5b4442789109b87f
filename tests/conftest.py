"""Real databases for every test: a migrated PostgreSQL template cloned per test,
and a migrated SQLite file copied per test."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler.store import migrate
from scheduler.store.database import Database, open_database
from tests.acceptance.processes import kill_leftovers
from tests.databases import postgres_database
from tests.postgres_cluster import Cluster, throwaway_cluster

# The fault soak's length beyond which pytest-timeout is not to stop it: setting up, the
# nodes' drains and the checker.
SOAK_OVERHEAD_S = 300


def pytest_addoption(parser: pytest.Parser) -> None:
    """The fault soak's options (pytest reads `pytest_addoption` from the root conftest
    only): how long, and which fault plan (tests/soak/README.md)."""
    group = parser.getgroup("soak", "the fault soak (tests/soak)")
    group.addoption(
        "--soak-minutes",
        type=float,
        default=3.0,
        help="how long the fault soak injects faults and settles (default 3)",
    )
    group.addoption(
        "--soak-burners",
        type=int,
        default=0,
        help="processes that spin on the CPU for the whole soak, so that every node,"
        " proxy and the server compete for it (default 0)",
    )
    group.addoption(
        "--soak-seed",
        type=int,
        default=None,
        help="the seed of the soak's fault plan (default: a random one, printed)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The soak's timeout follows --soak-minutes."""
    minutes = float(config.getoption("--soak-minutes"))
    for item in items:
        if item.get_closest_marker("soak") is not None:
            item.add_marker(pytest.mark.timeout(minutes * 60 + SOAK_OVERHEAD_S))


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    with postgres_database() as url:
        database = open_database(url, must_exist=False)
        migrate.upgrade(database)
        database.dispose()
        yield url.rsplit("/", 1)[1]


@pytest.fixture
def postgres_url(postgres_template: str) -> Iterator[str]:
    """A fresh, migrated database of its own for one test."""
    with postgres_database(template=postgres_template) as url:
        yield url


@pytest.fixture
def empty_postgres_url() -> Iterator[str]:
    """A database with no scheduler schema at all."""
    with postgres_database() as url:
        yield url


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


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """A PostgreSQL server of the test's own, migrated, to restart, stop or freeze."""
    with throwaway_cluster() as server:
        yield server


@pytest.fixture(autouse=True)
def _no_node_outlives_its_test() -> Iterator[None]:
    """A test that failed before it stopped its `scheduler` processes would leave them
    running for the rest of the session (loading every later test, and the soak):
    they are killed as the test ends."""
    yield
    kill_leftovers()
