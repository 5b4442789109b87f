"""Opening the database: URL checks, engine settings per backend, the database clock.

SQLite is opened in WAL mode with `BEGIN IMMEDIATE` so that several processes on one
file queue for the write lock instead of failing with "database is locked", and with
`synchronous=FULL`: in WAL mode NORMAL may lose the last commits on a power loss, and a
claim the node already acted on must not vanish and be claimed again.

On PostgreSQL, transactions that take locks other nodes wait for are `guarded()`: a lock
wait, a statement and an idle moment inside the transaction are each bounded, so a node
frozen mid-transaction (SIGSTOP, a paused VM) is cut off by the server instead of
stalling every node behind its locks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, func, literal, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.sql.expression import ColumnElement

from scheduler.errors import UserError
from scheduler.model import lock_key
from scheduler.store.deadlines import WATCH
from scheduler.store.faults import UNSENDABLE, StoreError, translate
from scheduler.store.schema import UTCDateTime

SQLITE_BUSY_TIMEOUT_S = 30
CONNECT_TIMEOUT_S = 5
# Bounds of a guarded transaction (PostgreSQL). A healthy claim waits milliseconds for
# another node's claim lock and never sits idle inside its transaction; a node that does
# for this long is frozen, and the server ends its session, releasing its locks.
LOCK_TIMEOUT_S = 2.0
IDLE_IN_TRANSACTION_S = 5.0
STATEMENT_TIMEOUT_S = 60.0
# TCP keepalives and the user timeout of PostgreSQL connections (libpq settings).
KEEPALIVE_IDLE_S = 5
KEEPALIVE_INTERVAL_S = 2
KEEPALIVE_COUNT = 3
TCP_USER_TIMEOUT_MS = 10_000
# Connections a pool keeps open between uses; more are opened for bursts and closed after.
POOL_KEPT = 5
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


_BOUND = text(
    "SELECT set_config('lock_timeout', :lock, true),"
    " set_config('idle_in_transaction_session_timeout', :idle, true),"
    " set_config('statement_timeout', :statement, true),"
    " statement_timestamp()"
)
# The same, then the job locks: `locked` reads `settings`, so the bounds are in force
# before the first lock is waited for; a volatile function in the select list runs
# after the sort, so the locks are taken in key order (no deadlock between nodes).
_BOUND_AND_LOCK = text(
    """
    WITH settings AS MATERIALIZED (
        SELECT set_config('lock_timeout', :lock, true) AS lock_set,
               set_config('idle_in_transaction_session_timeout', :idle, true) AS idle_set,
               set_config('statement_timeout', :statement, true) AS statement_set,
               statement_timestamp() AS began),
    locked AS MATERIALIZED (
        SELECT pg_advisory_xact_lock(key) FROM settings,
               unnest(CAST(:keys AS BIGINT[])) AS key ORDER BY key)
    SELECT began, (SELECT count(*) FROM locked) FROM settings
    """
)


@dataclass(frozen=True)
class Guarded:
    """An open guarded transaction and the database clock when it began."""

    connection: Connection
    began: datetime


@dataclass(frozen=True)
class Database:
    """An engine plus what differs between backends; the store's handle on everything.

    What differs is asked by name (`arrays`, `job_locks`, `one_writer`,
    `server_clock`), never by backend, so each store module says which form of a
    statement it needs and why. Every transaction turns a driver's error into the
    store's own (`StoreUnavailableError`, `StoreRejectedError`; see `store.faults`).

    `call_timeout`: no transaction or statement of this handle may take longer; past
    it the call's connection is cut from this side (see `store.deadlines`) and the call
    fails like any other fault. A node sets it below its leases, so that no call of its
    heartbeat or run path can block past a lease; None waits as long as the server.
    """

    engine: Engine
    call_timeout: float | None = None

    def bounded(self, seconds: float | None) -> Database:
        """The same database, with another deadline for each call."""
        return Database(self.engine, seconds)

    @property
    def is_postgres(self) -> bool:
        return self.engine.dialect.name == "postgresql"

    @property
    def arrays(self) -> bool:
        """Batches travel as one array a column (`unnest`), one statement and one plan
        whatever their size; otherwise one row a statement, in one transaction."""
        return self.is_postgres

    @property
    def job_locks(self) -> bool:
        """Transaction-scoped advisory locks serialise the writes of one job; otherwise
        every write transaction takes the database's single writer lock anyway."""
        return self.is_postgres

    @property
    def one_writer(self) -> bool:
        """One write transaction at a time (SQLite's BEGIN IMMEDIATE)."""
        return not self.is_postgres

    @property
    def server_clock(self) -> bool:
        """The database has a clock of its own; otherwise it shares this host's."""
        return self.is_postgres

    @property
    def sessions(self) -> bool:
        """Other sessions' locks can be seen (`pg_locks`): a node's liveness can be a lock."""
        return self.is_postgres

    @property
    def notifies(self) -> bool:
        """Writes can wake other sessions (NOTIFY), for those that LISTEN on a session of
        their own; otherwise the others find changes by asking."""
        return self.is_postgres

    @property
    def lateral(self) -> bool:
        """LATERAL subqueries: each job's newest rows read by one index scan apiece."""
        return self.is_postgres

    @property
    def display_url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    def insert(self, table: Any) -> Any:
        """The dialect's INSERT, which knows ON CONFLICT."""
        return dialect_insert(self.engine.dialect.name, table)

    def now(self) -> ColumnElement[datetime]:
        """The database clock as the statement began: the server's (not `now()`, which
        is the transaction's start), or this host's. Stable within a statement, so an
        index can serve a comparison with it."""
        if self.server_clock:
            return func.statement_timestamp().cast(UTCDateTime())
        return literal(datetime.now(UTC), UTCDateTime())

    def now_plus(self, seconds: ColumnElement[float] | float) -> ColumnElement[datetime]:
        """The database clock plus a number of seconds (a column or a value)."""
        if self.server_clock:
            return (
                func.statement_timestamp() + func.make_interval(0, 0, 0, 0, 0, 0, seconds)
            ).cast(UTCDateTime())
        return self._host_plus(seconds)

    def lease_until(self, seconds: ColumnElement[float] | float) -> ColumnElement[datetime]:
        """When a lease given now ends: the database clock at the moment the row is
        written, after any wait for a lock inside the statement, so that a lease is
        never written shorter than it was asked for (let alone already expired)."""
        if self.server_clock:
            return (func.clock_timestamp() + func.make_interval(0, 0, 0, 0, 0, 0, seconds)).cast(
                UTCDateTime()
            )
        return self._host_plus(seconds)

    @staticmethod
    def _host_plus(seconds: ColumnElement[float] | float) -> ColumnElement[datetime]:
        if not isinstance(seconds, int | float):
            raise TypeError("this host's times are computed per value, not per column")
        return literal(datetime.now(UTC) + timedelta(seconds=seconds), UTCDateTime())

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        # The watch covers the COMMIT too (the begin block ends inside it).
        with (
            self._faults(),
            self.engine.connect() as connection,
            self._watched(connection),
            connection.begin(),
        ):
            yield connection

    @contextmanager
    def _faults(self) -> Iterator[None]:
        try:
            yield
        except (SQLAlchemyError, *UNSENDABLE) as error:
            raise translate(error) from error

    def _watched(self, connection: Connection) -> contextlib.AbstractContextManager[None]:
        if not self.is_postgres:
            return contextlib.nullcontext()
        return WATCH.watching(connection.connection.dbapi_connection, self.call_timeout)

    @contextmanager
    def guarded(
        self, *, lock_timeout: float = LOCK_TIMEOUT_S, jobs: Collection[str] = ()
    ) -> Iterator[Guarded]:
        """A transaction for writes that take locks other nodes wait for.

        With a server clock (PostgreSQL) its first statement bounds, for this
        transaction only (so behind a pooler nothing leaks into another client's
        session), how long it waits for a lock, runs a statement, and may sit idle: a
        node frozen inside it loses its session and its locks after
        IDLE_IN_TRANSACTION_S. It also reads the clock, and takes the advisory locks of
        `jobs` (in key order, after the bounds are set): the statements that follow see
        every row a holder of those locks committed. A single writer lock (SQLite) is
        bounded by its busy timeout instead, and needs no job lock.
        """
        with (
            self._faults(),
            self.engine.connect().execution_options(**{BOUNDED: True}) as connection,
            self._watched(connection),
            connection.begin(),
        ):
            if self.one_writer:
                yield Guarded(connection, datetime.now(UTC))
                return
            bounds = {
                "lock": f"{round(lock_timeout * 1000)}ms",
                "idle": f"{round(IDLE_IN_TRANSACTION_S * 1000)}ms",
                "statement": f"{round(STATEMENT_TIMEOUT_S * 1000)}ms",
            }
            keys = sorted({lock_key(job) for job in jobs}) if self.job_locks else []
            if keys:  # one round trip for the bounds, the clock and the locks
                began = connection.execute(_BOUND_AND_LOCK, {**bounds, "keys": keys}).one()[0]
            else:
                began = connection.execute(_BOUND, bounds).one()[3]
            yield Guarded(connection, began.astimezone(UTC))

    @contextmanager
    def autocommit(self) -> Iterator[Connection]:
        """Each statement its own transaction: one round trip instead of BEGIN, the
        statement and COMMIT, for writes that are a single statement anyway."""
        with self._faults(), self.engine.connect() as connection, self._watched(connection):
            yield connection.execution_options(isolation_level="AUTOCOMMIT")

    def read_clock(self) -> datetime:
        """The database's current time, to measure this host's clock against."""
        if not self.server_clock:
            return datetime.now(UTC)
        with self._faults(), self.engine.connect() as connection, self._watched(connection):
            moment = connection.execute(text("SELECT statement_timestamp()")).scalar_one()
        assert isinstance(moment, datetime)
        return moment.astimezone(UTC)

    def ping(self) -> None:
        with self._faults(), self.engine.connect() as connection, self._watched(connection):
            connection.execute(text("SELECT 1"))

    def dispose(self) -> None:
        self.engine.dispose()


def open_database(
    raw_url: str,
    *,
    must_exist: bool = True,
    connections: int = 10,
    application_name: str = "scheduler",
) -> Database:
    """Create the engine and prove it connects; every failure is one line for the user.

    `connections` is how many may be in use at once (a node: its workers and its side
    threads, so that no checkout waits on another thread's work); a few stay open
    between uses, the rest are closed when given back.
    """
    url = parse_database_url(raw_url)
    kept = min(connections, POOL_KEPT)
    if url.get_backend_name() == "sqlite":
        engine = _sqlite_engine(url, must_exist=must_exist, kept=kept, extra=connections - kept)
    else:
        engine = create_engine(
            url,
            pool_size=kept,
            max_overflow=connections - kept,
            pool_recycle=1800,
            connect_args={
                "connect_timeout": CONNECT_TIMEOUT_S,
                # A peer that vanished without closing (a partition, a dead host) is
                # found by the kernel: keepalives when idle, and a bound on how long
                # sent data may stay unacknowledged.
                "keepalives": 1,
                "keepalives_idle": KEEPALIVE_IDLE_S,
                "keepalives_interval": KEEPALIVE_INTERVAL_S,
                "keepalives_count": KEEPALIVE_COUNT,
                "tcp_user_timeout": TCP_USER_TIMEOUT_MS,
                # pg_stat_activity shows which node a session belongs to.
                "application_name": application_name[:63],
                # No server-side prepared statements: behind PgBouncer in transaction
                # mode (before 1.21) the next transaction may land on a server
                # connection where psycopg's prepared statement does not exist.
                "prepare_threshold": None,
            },
        )
        _bound_idle_transactions(engine)
    database = Database(engine)
    try:
        database.ping()
    except StoreError as error:
        engine.dispose()
        raise UserError(
            f"--database-url: cannot connect to {database.display_url}: {error.message}"
        ) from None
    return database


# Set by `guarded`, whose first statement sets the bounds itself.
BOUNDED = "scheduler_bounded"
_IDLE_BOUND = (
    f"SET LOCAL idle_in_transaction_session_timeout = {round(IDLE_IN_TRANSACTION_S * 1000)}"
)


def _bound_idle_transactions(engine: Engine) -> None:
    """Every transaction on PostgreSQL may sit idle for IDLE_IN_TRANSACTION_S at most:
    a node partitioned or frozen inside one (its heartbeat's renewal, an outcome, an
    item) would otherwise keep its row locks until the network heals, and no other node
    could take its runs over. Transaction-local, so nothing leaks through a pooler into
    another client's session; one statement more per transaction, none on the claim."""

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        options = connection.get_execution_options()
        if options.get(BOUNDED) or options.get("isolation_level") == "AUTOCOMMIT":
            return
        connection.exec_driver_sql(_IDLE_BOUND)


def _sqlite_engine(url: URL, *, must_exist: bool, kept: int, extra: int) -> Engine:
    path = Path(url.database or "")
    if must_exist and not path.exists():
        raise UserError(
            f"--database-url: database file {str(path)!r} does not exist; "
            "run `scheduler migrate` to create it"
        )
    engine = create_engine(
        url,
        pool_size=kept,
        max_overflow=extra,
        connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False},
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's begin event issue BEGIN IMMEDIATE instead of pysqlite's
        # deferred BEGIN, which deadlocks two writers upgrading from a read lock.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_S * 1000}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = FULL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def dialect_insert(dialect: str, table: Any) -> Any:
    """PostgreSQL's or SQLite's INSERT (ON CONFLICT), importing only the one in use: a
    command on SQLite need not load PostgreSQL's dialect (and the reverse)."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert  # noqa: PLC0415

        return insert(table)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert  # noqa: PLC0415

    return sqlite_insert(table)
