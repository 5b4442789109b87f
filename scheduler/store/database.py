"""Opening the database: URL checks, connections per backend, transactions, the clock.

The store speaks to the drivers directly (psycopg 3, the standard library's sqlite3)
through `store.connection`: a node's hot path, and every read-only command, load no SQL
toolkit (SQLAlchemy is loaded only by `scheduler migrate`, through Alembic).

SQLite is opened in WAL mode with `BEGIN IMMEDIATE` so that several processes on one
file queue for the write lock instead of failing with "database is locked", and with
`synchronous=FULL`: in WAL mode NORMAL may lose the last commits on a power loss, and a
claim the node already acted on must not vanish and be claimed again.

On PostgreSQL, transactions that take locks other nodes wait for are `guarded()`: a lock
wait, a statement and an idle moment inside the transaction are each bounded, so a node
frozen mid-transaction (SIGSTOP, a paused VM) is cut off by the server instead of
stalling every node behind its locks. Every other transaction may sit idle for
IDLE_IN_TRANSACTION_S at most. Each bound is set by the transaction's own first round
trip (`BEGIN; SELECT set_config(…)`), transaction-local, so that nothing leaks into
another client's session behind a pooler.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from scheduler.errors import UserError
from scheduler.instants import SYSTEM_TIME, TimeSource
from scheduler.model import ClockReading, lock_key
from scheduler.store.batch_gate import BatchGate
from scheduler.store.connection import Connection, Result
from scheduler.store.deadlines import WATCH
from scheduler.store.faults import StoreError, driver_errors, translate
from scheduler.store.pool import Pool, Share
from scheduler.store.urls import DatabaseURL, parse_database_url

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
# Where server-side prepared statements are allowed (`Database.prepare_statements`): a
# statement sent this many times on a connection is prepared there (psycopg's default).
PREPARE_THRESHOLD = 5

__all__ = [
    "CONNECT_TIMEOUT_S",
    "Connection",
    "Database",
    "Guarded",
    "Result",
    "open_database",
    "parse_database_url",
]

T = TypeVar("T")
# Every transaction's statements are short and planned for a few rows; JIT compilation
# only ever adds to them (a claim's plan on a runs table of 100,000 rows crossed
# `jit_above_cost` and spent 336 ms of 360 compiling: bench n). Off for the transaction,
# in its first round trip, so a pooler hands no setting on.
_NO_JIT = "set_config('jit', 'off', true)"
_BEGIN_IDLE_BOUND = (
    "BEGIN; SELECT set_config('idle_in_transaction_session_timeout', "
    f"'{round(IDLE_IN_TRANSACTION_S * 1000)}ms', true), {_NO_JIT}"
)


def _bounds_and_locks(lock_timeout: float, keys: list[int], *, keys_bound: bool = False) -> str:
    """A guarded transaction's first statement: its bounds, the clock and the job locks.
    Only numbers of our own are written into the text. The locks are taken after the
    bounds are in force (`locked` reads `settings`), in key order (no deadlock between
    nodes). `keys_bound`: the keys are the parameter `:keys`, not part of the text, so
    that the statement is the same whatever the jobs (prepared once a session)."""
    bounds = (
        f"set_config('lock_timeout', '{round(lock_timeout * 1000)}ms', true) AS lock_set,"
        " set_config('idle_in_transaction_session_timeout',"
        f" '{round(IDLE_IN_TRANSACTION_S * 1000)}ms', true) AS idle_set,"
        f" set_config('statement_timeout', '{round(STATEMENT_TIMEOUT_S * 1000)}ms', true)"
        f" AS statement_set, {_NO_JIT} AS jit_set, statement_timestamp() AS began"
    )
    if not keys:
        return f"SELECT {bounds}"
    array = (
        "CAST(:keys AS BIGINT[])"
        if keys_bound
        else f"ARRAY[{','.join(str(int(key)) for key in keys)}]::BIGINT[]"
    )
    return (
        f"WITH settings AS MATERIALIZED (SELECT {bounds}),"
        " locked AS MATERIALIZED (SELECT pg_advisory_xact_lock(key) FROM settings,"
        f" unnest({array}) AS key ORDER BY key)"
        " SELECT (SELECT count(*) FROM locked) AS locks, began FROM settings"
    )


@dataclass(frozen=True)
class Guarded:
    """An open guarded transaction and the database clock when it began."""

    connection: Connection
    began: datetime


@dataclass
class _ServerSessions:
    """Whether each pooled connection is a server session of its own, which keeps what
    was prepared on it (set once the node knows no pooler sits in between)."""

    prepared: bool = False


@dataclass(frozen=True, eq=False)
class Database:
    """A pool of connections plus what differs between backends; the store's handle on
    everything.

    What differs is asked by name (`arrays`, `job_locks`, `one_writer`,
    `server_clock`), never by backend, so each store module says which form of a
    statement it needs and why. Every call turns a driver's error into the store's own
    (`StoreUnavailableError`, `StoreRejectedError`; see `store.faults`).

    `call_timeout`: no transaction or statement of this handle may take longer; past
    it the call's connection is cut from this side (see `store.deadlines`) and the call
    fails like any other fault. A node sets it below its leases, so that no call of its
    heartbeat or run path can block past a lease; None waits as long as the server.
    """

    url: DatabaseURL
    pool: Pool[Any] = field(repr=False)
    call_timeout: float | None = None
    # Told of every statement's text as it is sent (see `recording`).
    listeners: list[Callable[[str], None]] = field(default_factory=list, repr=False)
    # Shared by every handle on this pool (`bounded`): see `prepare_statements`.
    server_sessions: _ServerSessions = field(default_factory=_ServerSessions, repr=False)
    # Every connection this handle borrows takes a place in it first (`shared`).
    share: Share | None = field(default=None, repr=False)
    # This host's clocks: SQLite's database clock, and a node's between readings. A
    # virtual clock in tests (`scheduler.testing`); the real ones everywhere else.
    time_source: TimeSource = field(default=SYSTEM_TIME, repr=False, compare=False)
    # Shared by every handle made from this one: the process's batch writes of runs and
    # its renewals take turns (`store.batch_gate`).
    batch_gate: BatchGate = field(default_factory=BatchGate, repr=False, compare=False)

    def bounded(self, seconds: float | None) -> Database:
        """The same database (and pool), with another deadline for each call."""
        return replace(self, call_timeout=seconds)

    def shared(self, most: int, holders: str) -> Database:
        """The same database, of whose pool this handle (and those made from it) holds
        at most `most` connections at once: the rest stay for the pool's other users.
        `holders` names who borrows through it, in the error of a share that stays full."""
        return replace(self, share=Share(most, holders))

    def prepare_statements(self) -> None:
        """PostgreSQL, on connections that are the node's own sessions (no transaction
        pooler between): prepare the statements sent again and again on a connection,
        so that the server plans a start or an outcome batch once, not every time (half
        its cost in a burst, bench b). Off by default, and so for every command: behind
        PgBouncer in transaction mode (before 1.21) the next transaction may land on a
        server connection where the prepared statement does not exist."""
        if self.is_postgres:
            self.server_sessions.prepared = True

    @contextmanager
    def recording(self) -> Iterator[list[str]]:
        """The texts of the statements sent during the block, in order (for tests and
        benchmarks that count round trips)."""
        sent: list[str] = []
        self.listeners.append(sent.append)
        try:
            yield sent
        finally:
            self.listeners.remove(sent.append)

    def __hash__(self) -> int:
        return hash((id(self.pool), self.call_timeout))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Database)
            and other.pool is self.pool
            and other.call_timeout == self.call_timeout
        )

    @property
    def is_postgres(self) -> bool:
        return self.url.is_postgres

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
        return self.url.display()

    # -- the clock, as SQL --------------------------------------------------------
    #
    # PostgreSQL's clock is in the statement; SQLite shares this host's, which goes into
    # the statement as a value (`:now`, which every statement on SQLite is given: see
    # `store.connection`).

    @property
    def now(self) -> str:
        """The database clock as the statement began: the server's (not `now()`, which
        is the transaction's start), or this host's. Stable within a statement, so an
        index can serve a comparison with it."""
        return "statement_timestamp()" if self.server_clock else ":now"

    def now_plus(self, seconds: str) -> str:
        """PostgreSQL: the database clock plus `seconds`, SQL (a column, a parameter)."""
        assert self.server_clock, "this host's times are values: see `after`"
        return f"(statement_timestamp() + make_interval(secs => {seconds}))"

    def lease_until(self, seconds: str) -> str:
        """PostgreSQL: when a lease of `seconds` (SQL) given now ends: the database clock
        at the moment the row is written, after any wait for a lock inside the
        statement, so that a lease is never written shorter than it was asked for (let
        alone already expired)."""
        assert self.server_clock, "this host's times are values: see `lease`"
        return f"(clock_timestamp() + make_interval(secs => {seconds}))"

    def host_after(self, seconds: float) -> datetime:
        """This host's clock plus `seconds` (SQLite's leases and retries are values)."""
        return self.time_source.wall() + timedelta(seconds=seconds)

    def after(self, name: str, seconds: float) -> tuple[str, dict[str, Any]]:
        """`seconds` from now by the database clock, as SQL and its parameter `name`:
        the server's clock, or this host's computed here (SQLite's times are values)."""
        if self.server_clock:
            return self.now_plus(f":{name}"), {name: seconds}
        return f":{name}", {name: self.host_after(seconds)}

    def lease(self, name: str, seconds: float) -> tuple[str, dict[str, Any]]:
        """When a lease of `seconds` given now ends (see `lease_until`), as SQL and its
        parameter `name`."""
        if self.server_clock:
            return self.lease_until(f":{name}"), {name: seconds}
        return f":{name}", {name: self.host_after(seconds)}

    # -- transactions -------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One transaction; committed when the block ends, rolled back if it raises."""
        begin = _BEGIN_IDLE_BOUND if self.is_postgres else "BEGIN IMMEDIATE"
        with self._borrowed() as connection:
            connection.execute(begin)
            yield from _committed(connection, connection)

    @contextmanager
    def guarded(
        self, *, lock_timeout: float = LOCK_TIMEOUT_S, jobs: Collection[str] = ()
    ) -> Iterator[Guarded]:
        """A transaction for writes that take locks other nodes wait for.

        With a server clock (PostgreSQL) its first round trip begins it and bounds, for
        this transaction only (so behind a pooler nothing leaks into another client's
        session), how long it waits for a lock, runs a statement, and may sit idle: a
        node frozen inside it loses its session and its locks after
        IDLE_IN_TRANSACTION_S. It also reads the clock, and takes the advisory locks of
        `jobs` (in key order, after the bounds are set): the statements that follow see
        every row a holder of those locks committed. A single writer lock (SQLite) is
        bounded by its busy timeout instead, and needs no job lock.
        """
        with self._borrowed() as connection:
            if self.one_writer:
                connection.execute("BEGIN IMMEDIATE")
                guarded = Guarded(connection, self.time_source.wall())
            else:
                keys = sorted({lock_key(job) for job in jobs}) if self.job_locks else []
                first = _bounds_and_locks(lock_timeout, keys)
                began = connection.execute(f"BEGIN; {first}").one().began
                guarded = Guarded(connection, began)
            yield from _committed(connection, guarded)

    def guarded_batch(
        self,
        statements: Sequence[tuple[str, Mapping[str, Any] | None]],
        *,
        lock_timeout: float = LOCK_TIMEOUT_S,
        jobs: Collection[str] = (),
    ) -> list[Result]:
        """PostgreSQL: a guarded transaction (see `guarded`) whose statements are known
        before it begins, sent with its BEGIN, bounds, locks and COMMIT in one round trip
        (pipeline mode) instead of three. Each statement still sees what the holders of
        the locks committed: it begins after the locks are granted. Their results."""
        assert self.job_locks, "pipelined transactions are PostgreSQL's"
        keys = sorted({lock_key(job) for job in jobs})
        with self._borrowed() as connection:
            try:
                results = connection.pipeline(
                    [
                        ("BEGIN", None),
                        (
                            _bounds_and_locks(lock_timeout, keys, keys_bound=True),
                            {"keys": keys} if keys else None,
                        ),
                        *statements,
                        ("COMMIT", None),
                    ]
                )
            except BaseException:
                with contextlib.suppress(*driver_errors(True)):
                    connection.execute("ROLLBACK")
                raise
        return results[2:-1]

    @contextmanager
    def autocommit(self) -> Iterator[Connection]:
        """Each statement its own transaction: one round trip instead of BEGIN, the
        statement and COMMIT, for writes that are a single statement anyway."""
        with self._borrowed() as connection:
            yield connection

    @contextmanager
    def _borrowed(self) -> Iterator[Connection]:
        """A connection of the pool for the block, under the call's deadline; a driver's
        error becomes the store's, and the connection it broke is not lent again. A
        handle with a share waits for a place in it first."""
        share = self.share
        if share is not None:
            share.enter()
        postgres = self.is_postgres
        errors = driver_errors(postgres)
        try:
            try:
                raw = self.pool.borrow()
            except errors as error:
                raise translate(error, postgres=postgres, connection_lost=True) from error
            if self.is_postgres:
                threshold = PREPARE_THRESHOLD if self.server_sessions.prepared else None
                if raw.prepare_threshold != threshold:
                    raw.prepare_threshold = threshold
            connection = Connection(raw, self.url.backend, self.listeners, self.time_source)
            try:
                with self._watched(raw):
                    yield connection
            except errors as error:
                raise translate(
                    error, postgres=postgres, connection_lost=_lost(connection)
                ) from error
            finally:
                self.pool.give_back(raw, broken=_unusable(connection), lost=_lost(connection))
        finally:
            if share is not None:
                share.leave()

    def _watched(self, raw: Any) -> contextlib.AbstractContextManager[None]:
        if not self.is_postgres:
            return contextlib.nullcontext()
        return WATCH.watching(raw, self.call_timeout)

    def read_clock(self) -> datetime:
        """The database's current time."""
        return self.clock_reading().moment

    def clock_reading(self) -> ClockReading:
        """The database's current time, to measure this host's clock against, placed at
        the statement that read it (a wait for a connection comes before it)."""
        if not self.server_clock:
            return ClockReading.host(self.time_source.wall(), self.time_source.monotonic())
        with self.autocommit() as connection:
            sent = time.monotonic()
            moment = connection.execute("SELECT statement_timestamp() AS now").scalar()
            received = time.monotonic()
        assert isinstance(moment, datetime)
        return ClockReading(sent, moment, received)

    def ping(self) -> None:
        with self.autocommit() as connection:
            connection.execute("SELECT 1")

    def dispose(self) -> None:
        self.pool.dispose()


def _committed(connection: Connection, value: T) -> Iterator[T]:
    """Yield `value` inside the connection's open transaction; COMMIT after, ROLLBACK if
    the block raised (a rollback that fails leaves the connection broken, never lent
    again)."""
    try:
        yield value
    except BaseException:
        with contextlib.suppress(*driver_errors(connection.is_postgres)):
            connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def _unusable(connection: Connection) -> bool:
    """The connection is closed, broken, or still inside a transaction."""
    raw = connection.raw
    if connection.is_postgres:
        from psycopg.pq import TransactionStatus  # noqa: PLC0415 - loaded with psycopg

        return _lost(connection) or raw.info.transaction_status != TransactionStatus.IDLE
    return bool(raw.in_transaction)


def _lost(connection: Connection) -> bool:
    """The connection lost its server (PostgreSQL; a SQLite file has no such fault)."""
    return connection.is_postgres and bool(connection.raw.closed or connection.raw.broken)


def open_database(
    raw_url: str,
    *,
    must_exist: bool = True,
    connections: int = 10,
    application_name: str = "scheduler",
    prove: bool = True,
    durable: bool = True,
) -> Database:
    """Set up the pool and prove it connects (unless not `prove`); every failure is one
    line for the user.

    `connections` is how many may be in use at once (a node: its workers and its side
    threads, so that no checkout waits on another thread's work); a few stay open
    between uses, the rest are closed when given back. `durable=False` (SQLite): commits
    are not flushed to the disk, for a throwaway file (`scheduler.testing`), never a node's.
    """
    url = parse_database_url(raw_url)
    kept = min(connections, POOL_KEPT)
    if url.is_postgres:
        pool: Pool[Any] = Pool(
            _postgres_connector(url, application_name), _close, kept=kept, most=connections
        )
    else:
        path = Path(url.path)
        if must_exist and not path.exists():
            raise UserError(
                f"--database-url: database file {url.path!r} does not exist; "
                "run `scheduler migrate` to create it"
            )
        pool = Pool(
            lambda: _sqlite_connection(path, durable=durable), _close, kept=kept, most=connections
        )
    database = Database(url, pool)
    if not prove:
        return database
    try:
        found = _server_version(database)  # proves the connection, as a ping would
    except StoreError as error:
        pool.dispose()
        raise UserError(
            f"--database-url: cannot connect to {database.display_url}: {error.message}"
        ) from None
    refused = unsupported(url.is_postgres, found)
    if refused:
        pool.dispose()
        raise UserError(f"--database-url: {refused}")
    return database


# The oldest servers supported: PostgreSQL 13 (the oldest its project still maintains),
# SQLite 3.35 (RETURNING, which the store's claims use).
MINIMUM_POSTGRES = (13,)
MINIMUM_SQLITE = (3, 35)


def _server_version(database: Database) -> tuple[int, ...]:
    """PostgreSQL's (major, minor), or SQLite's library version, read in one round trip."""
    with database.autocommit() as connection:
        if database.is_postgres:
            number = int(
                connection.execute("SELECT current_setting('server_version_num')").scalar()
            )
            return (number // 10000, number % 10000)
        text = str(connection.execute("SELECT sqlite_version()").scalar())
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def unsupported(postgres: bool, version: tuple[int, ...]) -> str | None:
    """One line if the database is older than the oldest supported; None otherwise (a
    newer one than those tested is let through)."""
    shown = ".".join(str(part) for part in version)
    if postgres and version < MINIMUM_POSTGRES:
        return f"PostgreSQL {shown} is not supported: the scheduler needs PostgreSQL 13 or later"
    if not postgres and version < MINIMUM_SQLITE:
        return (
            f"SQLite {shown} is not supported: the scheduler needs SQLite 3.35 or later"
            " (Python's sqlite3 module is built against it)"
        )
    return None


def _close(raw: Any) -> None:
    raw.close()


def postgres_settings(application_name: str) -> dict[str, Any]:
    """libpq settings of every connection of a node (the pool's, its liveness and watch
    sessions)."""
    return {
        "connect_timeout": CONNECT_TIMEOUT_S,
        # A peer that vanished without closing (a partition, a dead host) is found by
        # the kernel: keepalives when idle, and a bound on how long sent data may stay
        # unacknowledged.
        "keepalives": 1,
        "keepalives_idle": KEEPALIVE_IDLE_S,
        "keepalives_interval": KEEPALIVE_INTERVAL_S,
        "keepalives_count": KEEPALIVE_COUNT,
        "tcp_user_timeout": TCP_USER_TIMEOUT_MS,
        # pg_stat_activity shows which node a session belongs to.
        "application_name": application_name[:63],
        # No server-side prepared statements until the node knows it has sessions of its
        # own (`Database.prepare_statements`): behind PgBouncer in transaction mode
        # (before 1.21) the next transaction may land on a server connection where
        # psycopg's prepared statement does not exist.
        "prepare_threshold": None,
    }


def _postgres_connector(url: DatabaseURL, application_name: str) -> Any:
    import psycopg  # noqa: PLC0415 - only a node on PostgreSQL loads the driver

    settings = postgres_settings(application_name)

    def connect() -> psycopg.Connection[Any]:
        # Transactions are begun by the store itself, with their bounds in the same
        # round trip (see `Database.transaction`).
        return psycopg.connect(url.conninfo, autocommit=True, **settings)

    return connect


def _sqlite_connection(path: Path, *, durable: bool = True) -> Any:
    import sqlite3  # noqa: PLC0415

    # Autocommit at the driver (isolation_level None): the store sends BEGIN IMMEDIATE
    # itself, where pysqlite's deferred BEGIN deadlocks two writers upgrading from a read
    # lock.
    raw = sqlite3.connect(
        str(path), timeout=SQLITE_BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None
    )
    raw.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_S * 1000}")
    raw.execute("PRAGMA journal_mode = WAL")
    raw.execute("PRAGMA synchronous = FULL" if durable else "PRAGMA synchronous = OFF")
    return raw
