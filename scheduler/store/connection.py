"""One driver connection as the store uses it: SQL in, rows out, the same on both backends.

Statements are written once with `:name` parameters (psycopg's `%(name)s` is made from
them, once per text). What differs between the drivers stays here:

- instants: every instant is an aware UTC `datetime` above this module. SQLite keeps
  them as text, `YYYY-MM-DD HH:MM:SS.ffffff` in UTC (the format the tables have always
  held, so that comparing two as text compares the instants); PostgreSQL as
  `timestamptz`. A naive datetime is refused: it is a bug, not a time.
- rows: tuples whose fields are also named after their columns. Instants come back as
  aware UTC datetimes: on PostgreSQL by their type, on SQLite (which has no such type,
  nor booleans) by their column's name, `TIMESTAMP_COLUMNS`, and flags likewise by
  `FLAG_COLUMNS`.
"""

from __future__ import annotations

import functools
import operator
import re
from collections import namedtuple
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from scheduler.instants import SYSTEM_TIME, TimeSource

T = TypeVar("T")
# SQLite: every column (and alias) that holds an instant; a unit test checks the list
# against the tables.
TIMESTAMP_COLUMNS = frozenset(
    {
        "period",
        "lease_expires_at",
        "claimed_at",
        "queued_at",
        "started_at",
        "began_at",
        "finished_at",
        "retry_at",
        "first_seen",
        "last_seen",
        "paused_at",
        "resumed_at",
        "caught_up_to",
        "schedule_changed_at",
        "heartbeat_at",
        "liveness_since",
        "stopped_at",
        "done_at",
        "range_start",
        "range_end",
        "requested_at",
        "taken_at",
        "created_at",
        "next_try_at",
        "taken_until",
        "delivered_at",
        "progress",
        "registered_at",
        "start_at",
        "once_at",
        "next_due_at",
        "next_period",
        "updated_at",
        "fired_at",
        "deleted_at",
        "declared_at",
        "changed_at",
        # Aliases of computed instants.
        "now",
        "first",
        "last",
        "lease_at",
        "free_at",
        "waiting_since",
    }
)
# SQLite: every column (and alias) that holds a flag.
FLAG_COLUMNS = frozenset(
    {
        "paused",
        "force",
        "include_failed",
        "expired",
        "live",
        "held",
        "in_progress",
        "started",
        "overridden",
    }
)

Row = tuple[Any, ...]
_PLACEHOLDER = re.compile(r"--[^\n]*|'(?:[^']|'')*'|::|:(\w+)")


def sqlite_instant(moment: datetime) -> str:
    """An instant as SQLite keeps it."""
    if moment.tzinfo is None:
        raise ValueError(f"naive datetime {moment!r} given where UTC is required")
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "microseconds")


def _from_sqlite(value: Any) -> Any:
    if isinstance(value, str):
        return datetime.fromisoformat(value).replace(tzinfo=UTC)
    if isinstance(value, datetime) and value.tzinfo is None:
        # Parsed already by the connection's converters (Django's sqlite3 connection
        # declares them for DATETIME columns), from the same UTC text.
        return value.replace(tzinfo=UTC)
    return value


def _from_postgres(value: Any) -> Any:
    if isinstance(value, datetime) and value.tzinfo is not UTC:
        return value.astimezone(UTC)
    return value


def _flag(value: Any) -> Any:
    return value if value is None else bool(value)


@functools.lru_cache(maxsize=1024)
def pyformat(sql: str) -> str:
    """`:name` parameters as psycopg's `%(name)s`. psycopg reads every `%` of the text as
    its own (in literals and comments too), so each is doubled first; a `:name` inside a
    literal or a comment, and `::` casts, are left alone."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        return match.group(0) if name is None else f"%({name})s"

    return _PLACEHOLDER.sub(replace, sql.replace("%", "%%"))


@functools.lru_cache(maxsize=256)
def _row_type(names: tuple[str, ...]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    fields = namedtuple("Row", names, rename=True)  # type: ignore[misc]
    make: Callable[[Sequence[Any]], tuple[Any, ...]] = fields._make
    return make


class Result:
    """What a statement returned: its rows, fetched whole, and how many rows it changed."""

    __slots__ = ("columns", "rowcount", "rows")

    def __init__(self, columns: tuple[str, ...], rows: list[Any], rowcount: int) -> None:
        self.columns, self.rows, self.rowcount = columns, rows, rowcount

    def __iter__(self) -> Iterator[Any]:
        return iter(self.rows)

    def all(self) -> list[Any]:
        return self.rows

    def first(self) -> Any | None:
        return self.rows[0] if self.rows else None

    def one(self) -> Any:
        if len(self.rows) != 1:
            raise LookupError(f"expected one row, got {len(self.rows)}")
        return self.rows[0]

    def scalar(self) -> Any:
        """The first column of the first row, or None when there is no row."""
        return self.rows[0][0] if self.rows else None

    def scalars(self) -> list[Any]:
        return [row[0] for row in self.rows]

    def mappings(self) -> list[dict[str, Any]]:
        return [row._asdict() for row in self.rows]


class Connection:
    """A borrowed connection, inside the transaction (or the autocommit run) the
    database opened for it."""

    __slots__ = ("_encode", "_listeners", "_paramstyle", "_time", "backend", "raw")

    def __init__(
        self,
        raw: Any,
        backend: str,
        listeners: Sequence[Callable[[str], None]] = (),
        time_source: TimeSource = SYSTEM_TIME,
    ) -> None:
        self.raw, self.backend, self._listeners = raw, backend, listeners
        postgres = backend == "postgresql"
        self._time = time_source
        self._paramstyle: Callable[[str], str] = pyformat if postgres else _same
        self._encode: Callable[[Mapping[str, Any] | None], Mapping[str, Any]] = (
            _checked if postgres else functools.partial(_for_sqlite, wall=time_source.wall)
        )

    @property
    def is_postgres(self) -> bool:
        return self.backend == "postgresql"

    def host_clock(self) -> datetime:
        """This host's clock (SQLite's database clock), as the database handle keeps it."""
        return self._time.wall()

    def execute(self, sql: str, parameters: Mapping[str, Any] | None = None) -> Result:
        """Run one statement (several, separated by `;`, when it has no parameters on
        PostgreSQL: sent as one simple query, one round trip)."""
        for listener in self._listeners:
            listener(sql)
        if parameters is None and self.is_postgres:
            return self._result(*self._send(sql, None))
        return self._result(*self._send(self._paramstyle(sql), self._encode(parameters)))

    def pipeline(self, statements: Sequence[tuple[str, Mapping[str, Any] | None]]) -> list[Result]:
        """PostgreSQL: several statements (one each) sent together, in one round trip
        (psycopg's pipeline mode); their results, in order. One that fails aborts those
        after it, and its error is raised here."""
        for sql, _ in statements:
            for listener in self._listeners:
                listener(sql)
        cursors = []
        with self.raw.pipeline():
            for sql, parameters in statements:
                cursor = self.raw.cursor()
                if parameters is None:
                    cursor.execute(sql)
                else:
                    cursor.execute(self._paramstyle(sql), self._encode(parameters))
                cursors.append(cursor)
        results = []
        for cursor in cursors:
            description = cursor.description
            fetched = cursor.fetchall() if description is not None else []
            results.append(self._result(description, fetched, cursor.rowcount))
            cursor.close()
        return results

    def _result(self, description: Any, fetched: list[Any], rowcount: int) -> Result:
        if description is None:
            return Result((), [], rowcount)
        names = tuple(column[0] for column in description)
        if self.is_postgres:
            decoders = _postgres_decoders(tuple(column[1] for column in description))
        else:
            decoders = _sqlite_decoders(names)
        make = _row_type(names)
        if decoders:
            rows = [make(_decoded(row, decoders)) for row in fetched]
        else:
            rows = [make(row) for row in fetched]
        return Result(names, rows, rowcount)

    def execute_many(self, sql: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run one statement once per set of parameters (no rows come back)."""
        if not rows:
            return
        for listener in self._listeners:
            listener(sql)
        if self.is_postgres:
            encoded = [_checked(row) for row in rows]
        else:  # one clock reading for all the rows
            now = sqlite_instant(self._time.wall())
            encoded = [_for_sqlite(row, now) for row in rows]
        cursor = self.raw.cursor()
        try:
            cursor.executemany(self._paramstyle(sql), encoded)
        finally:
            cursor.close()

    def _send(self, sql: str, parameters: Mapping[str, Any] | None) -> tuple[Any, list[Any], int]:
        """The statement's description (None if it returns no rows), rows, row count."""
        cursor = self.raw.cursor()
        try:
            if parameters is None:
                cursor.execute(sql)
                while cursor.nextset():  # several statements: the last one's rows
                    pass
            else:
                cursor.execute(sql, parameters)
            description = cursor.description
            fetched = cursor.fetchall() if description is not None else []
            return description, fetched, cursor.rowcount
        finally:
            cursor.close()


class ForeignConnection(Connection):
    """A job's own SQLAlchemy connection, inside the job's transaction: the store's
    statements go through it (`exec_driver_sql`), so that they commit or roll back with
    the job's writes and SQLAlchemy keeps track of its transaction."""

    __slots__ = ()

    def _send(self, sql: str, parameters: Mapping[str, Any] | None) -> tuple[Any, list[Any], int]:
        result = self.raw.exec_driver_sql(sql, dict(parameters or {}))
        if not result.returns_rows:
            return None, [], result.rowcount
        description = result.cursor.description
        return description, list(result.fetchall()), result.rowcount


def _same(sql: str) -> str:
    return sql


def _checked(parameters: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """PostgreSQL's parameters: instants checked, lists as array text (`array_text`)."""
    assert parameters is not None
    if not any(isinstance(value, list | tuple) for value in parameters.values()):
        for value in parameters.values():
            _aware(value)
        return parameters
    return {
        name: array_text(value) if isinstance(value, list | tuple) else _aware(value)
        for name, value in parameters.items()
    }


def _aware(value: T) -> T:
    if isinstance(value, datetime) and value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r} given where UTC is required")
    return value


_TZINFO = operator.attrgetter("tzinfo")
# The forms of the kinds written unquoted. A list of nothing but None is common: the
# error and retry columns of a batch of runs that succeeded.
_FORMS: dict[type, Callable[[Any], str]] = {
    int: int.__repr__,
    bool: {True: "t", False: "f"}.__getitem__,
    type(None): lambda _: "NULL",
}


def array_text(values: Sequence[Any]) -> str:
    """A list as PostgreSQL's array input (`{"a","b",NULL}`), which every statement
    casts to its array type (`CAST(:ids AS TEXT[])`). The driver dumps a list element by
    element in Python; a batch's arrays so cost a node a tenth of its time in a burst of
    short runs (bench b), where one string costs it next to nothing."""
    whole = _whole(values) if values else ""
    if whole is None:
        whole = ",".join([_array_element(value) for value in values])
    return "{" + whole + "}"


def _whole(values: Sequence[Any]) -> str | None:
    """The elements of a list of one kind with nothing to escape, joined with no Python
    call per element (half of what a batch's arrays cost); its UTC instants are written
    once each, a burst's periods being one instant. None for any other list."""
    kinds = set(map(type, values))
    if all(issubclass(kind, str) for kind in kinds):  # text, and the enums that are text
        joined = '","'.join(values)
        # No quote but the separators', and no backslash: nothing to escape.
        if joined.count('"') == 2 * (len(values) - 1) and "\\" not in joined:
            return '"' + joined + '"'
        return None
    if kinds == {datetime} and set(map(_TZINFO, values)) == {UTC}:
        texts = {value: value.isoformat() for value in set(values)}
        return '"' + '","'.join(map(texts.__getitem__, values)) + '"'
    form = _FORMS.get(kinds.pop()) if len(kinds) == 1 else None
    return None if form is None else ",".join(map(form, values))


def _array_element(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):  # every text quoted: no word, brace or space is special
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, int | float):
        return repr(value)  # a float's repr reads back as the same float8
    if isinstance(value, datetime):
        return '"' + _aware(value).isoformat() + '"'
    raise TypeError(f"no array form for {type(value).__name__} {value!r}")


def _for_sqlite(
    parameters: Mapping[str, Any] | None,
    now: str | None = None,
    *,
    wall: Callable[[], datetime] = SYSTEM_TIME.wall,
) -> Mapping[str, Any]:
    """Instants as SQLite's text, and `:now`, this host's clock (SQLite has none of its
    own), for every statement that names it; `now` when the caller read it already."""
    encoded = {
        name: sqlite_instant(value) if isinstance(value, datetime) else value
        for name, value in (parameters or {}).items()
    }
    if "now" not in encoded:
        encoded["now"] = now or sqlite_instant(wall())
    return encoded


Decoders = tuple[tuple[int, Callable[[Any], Any]], ...]
# PostgreSQL's type oids of `timestamptz` and `timestamptz[]`.
_TIMESTAMPTZ, _TIMESTAMPTZ_ARRAY = 1184, 1185


@functools.lru_cache(maxsize=256)
def _postgres_decoders(types: tuple[int, ...]) -> Decoders:
    """PostgreSQL types its columns: its instants come in the session's zone, made UTC."""
    found: list[tuple[int, Callable[[Any], Any]]] = []
    for index, oid in enumerate(types):
        if oid == _TIMESTAMPTZ:
            found.append((index, _from_postgres))
        elif oid == _TIMESTAMPTZ_ARRAY:
            found.append((index, _all_from_postgres))
    return tuple(found)


@functools.lru_cache(maxsize=256)
def _sqlite_decoders(names: tuple[str, ...]) -> Decoders:
    """SQLite does not type its columns: their names say what they hold."""
    found: list[tuple[int, Callable[[Any], Any]]] = []
    for index, name in enumerate(names):
        if name in TIMESTAMP_COLUMNS:
            found.append((index, _from_sqlite))
        elif name in FLAG_COLUMNS:
            found.append((index, _flag))
    return tuple(found)


def _all_from_postgres(values: Any) -> Any:
    return values if values is None else [_from_postgres(value) for value in values]


def _decoded(row: Sequence[Any], decoders: Decoders) -> list[Any]:
    values = list(row)
    for index, decode in decoders:
        values[index] = decode(values[index])
    return values


def in_list(name: str, values: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """`values` as the inside of an IN list of parameters `name_0`, `name_1`, …, and the
    parameters (an empty list is `NULL`, which nothing is IN)."""
    if not values:
        return "NULL", {}
    names = [f"{name}_{index}" for index in range(len(values))]
    return ", ".join(f":{each}" for each in names), dict(zip(names, values, strict=True))


def pairs_in(name: str, pairs: Sequence[tuple[Any, Any]]) -> tuple[str, dict[str, Any]]:
    """Pairs as the inside of a row-value IN list, `(:name_0_a, :name_0_b), …`, and the
    parameters."""
    if not pairs:
        return "(NULL, NULL)", {}
    parameters: dict[str, Any] = {}
    rows = []
    for index, (first, second) in enumerate(pairs):
        parameters[f"{name}_{index}_a"], parameters[f"{name}_{index}_b"] = first, second
        rows.append(f"(:{name}_{index}_a, :{name}_{index}_b)")
    return ", ".join(rows), parameters
