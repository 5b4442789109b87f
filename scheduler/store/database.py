"""Opening the database: URL checks, engine settings per backend, the database clock.

SQLite is opened in WAL mode with `BEGIN IMMEDIATE` so that several processes on one
file queue for the write lock instead of failing with "database is locked".
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, func, literal, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.sql.expression import ColumnElement

from scheduler.errors import UserError
from scheduler.store.schema import UTCDateTime

SQLITE_BUSY_TIMEOUT_S = 30
CONNECT_TIMEOUT_S = 5
# What hosting platforms hand out (`postgres://`, Heroku and others) is PostgreSQL too.
POSTGRES_ALIASES = ("postgresql", "postgres")


def parse_database_url(raw: str) -> URL:
    """Normalise the URL the user gave and refuse the ones we cannot serve."""
    try:
        url = make_url(raw)
    except ArgumentError:
        raise UserError(
            f"--database-url: cannot parse {raw!r} "
            "(expected sqlite:///path.db or postgresql://user@host/db)"
        ) from None
    # Read from the URL's text: asking SQLAlchemy would load the dialect first and fail
    # with a traceback for a name it does not know (`postgres://`, `foo://`).
    backend, _, driver = url.drivername.partition("+")
    if backend in POSTGRES_ALIASES:
        if driver == "psycopg2":
            raise UserError(
                "--database-url: use postgresql:// or postgresql+psycopg:// (psycopg 3); "
                "psycopg2 is not installed"
            )
        return url.set(drivername="postgresql+psycopg")
    if backend == "sqlite":
        if not url.database or url.database == ":memory:":
            raise UserError(
                "--database-url: an in-memory SQLite database cannot be shared; "
                "give a file, e.g. sqlite:///scheduler.db"
            )
        return url
    raise UserError(f"--database-url: unsupported database {backend!r} (use sqlite or postgresql)")


@dataclass(frozen=True)
class Database:
    """An engine plus what differs between backends; the store's handle on everything."""

    engine: Engine

    @property
    def is_postgres(self) -> bool:
        return self.engine.dialect.name == "postgresql"

    @property
    def display_url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    def insert(self, table: Any) -> Any:
        """The dialect's INSERT, which knows ON CONFLICT."""
        return postgresql.insert(table) if self.is_postgres else sqlite.insert(table)

    def now(self) -> ColumnElement[datetime]:
        """The database clock: the server's on PostgreSQL; SQLite shares our host's."""
        if self.is_postgres:
            return func.now().cast(UTCDateTime())
        return literal(datetime.now(UTC), UTCDateTime())

    def now_plus(self, seconds: ColumnElement[float] | float) -> ColumnElement[datetime]:
        """The database clock plus a number of seconds (a column or a value)."""
        if self.is_postgres:
            return (func.now() + func.make_interval(0, 0, 0, 0, 0, 0, seconds)).cast(UTCDateTime())
        if not isinstance(seconds, int | float):
            raise TypeError("SQLite leases are computed per value, not per column")
        return literal(datetime.now(UTC) + timedelta(seconds=seconds), UTCDateTime())

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        with self.engine.begin() as connection:
            yield connection

    @contextmanager
    def autocommit(self) -> Iterator[Connection]:
        """Each statement its own transaction: one round trip instead of BEGIN, the
        statement and COMMIT, for writes that are a single statement anyway."""
        with self.engine.connect() as connection:
            yield connection.execution_options(isolation_level="AUTOCOMMIT")

    def read_clock(self) -> datetime:
        """The database's current time, to measure this host's clock against."""
        if not self.is_postgres:
            return datetime.now(UTC)
        with self.engine.connect() as connection:
            moment = connection.execute(text("SELECT statement_timestamp()")).scalar_one()
        assert isinstance(moment, datetime)
        return moment.astimezone(UTC)

    def ping(self) -> None:
        with self.engine.connect() as connection:
            connection.execute(text("SELECT 1"))

    def dispose(self) -> None:
        self.engine.dispose()


def open_database(raw_url: str, *, must_exist: bool = True, pool_size: int = 10) -> Database:
    """Create the engine and prove it connects; every failure is one line for the user."""
    url = parse_database_url(raw_url)
    if url.get_backend_name() == "sqlite":
        engine = _sqlite_engine(url, must_exist=must_exist)
    else:
        engine = create_engine(
            url,
            pool_size=pool_size,
            max_overflow=pool_size * 2,
            pool_recycle=1800,
            connect_args={
                "connect_timeout": CONNECT_TIMEOUT_S,
                "application_name": "scheduler",
                # No server-side prepared statements: behind PgBouncer in transaction
                # mode (before 1.21) the next transaction may land on a server
                # connection where psycopg's prepared statement does not exist.
                "prepare_threshold": None,
            },
        )
    database = Database(engine)
    try:
        database.ping()
    except DBAPIError as error:
        engine.dispose()
        raise UserError(
            f"--database-url: cannot connect to {database.display_url}: {first_line(error.orig)}"
        ) from None
    return database


def _sqlite_engine(url: URL, *, must_exist: bool) -> Engine:
    path = Path(url.database or "")
    if must_exist and not path.exists():
        raise UserError(
            f"--database-url: database file {str(path)!r} does not exist; "
            "run `scheduler migrate` to create it"
        )
    engine = create_engine(
        url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False}
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's begin event issue BEGIN IMMEDIATE instead of pysqlite's
        # deferred BEGIN, which deadlocks two writers upgrading from a read lock.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_S * 1000}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def first_line(error: object) -> str:
    """A driver's message, squeezed to one line for a log field or a CLI error."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
