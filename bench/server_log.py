"""What a bench database's server logged, for the benches that count a node's
transactions (k, m) against a baseline tree.

`log_statements` turns on `log_statement = 'all'` for one bench database; a
transaction is then a COMMIT or ROLLBACK, or a statement outside BEGIN, counted from the
server's log (PGLOG, default Debian's /var/log/postgresql/postgresql-15-main.log) by
the database's own clock. `pg_stat_database` is not used: an idle backend reports its
counts late.
"""

from __future__ import annotations

import os
import re
import statistics
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg

from bench import harness

# Past start-up, and past the moment a backend flushes its statistics of start-up (an
# idle backend reports within about ten seconds).
SETTLE_S = 10.0

SERVER_LOG = Path(os.environ.get("PGLOG", "/var/log/postgresql/postgresql-15-main.log"))
_LINE = re.compile(r"^\S+ (\S+) UTC \[(\d+)\] \S+@(\S+) LOG:  (?:statement|execute [^:]*): (.*)")


def log_statements(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(harness.ADMIN_URL, autocommit=True) as connection:
        connection.execute(f"ALTER DATABASE \"{name}\" SET log_statement = 'all'")


@dataclass(frozen=True)
class Mark:
    """A moment by the database clock (`HH:MM:SS.fff`), and how long the server's log
    was then: a window is read from there on, not from the log's beginning (a log of
    a busy day holds hundreds of megabytes)."""

    time: str
    offset: int


def transactions(url: str, since: Mark, until: Mark) -> int:
    """Transactions the server logged on this database between two marks."""
    return sum(transactions_by_kind(url, since, until).values())


def _statements(log: Iterable[str]) -> Iterator[tuple[str, str, str, str]]:
    """(time, pid, database, statement) for each logged statement, its continuation
    lines joined (a statement that starts with a line break is known by the next)."""
    current: list[str] | None = None
    for line in log:
        found = _LINE.match(line)
        if found is None:
            if current is not None and line[:1].isspace():
                current[3] = f"{current[3]} {line.strip()}"
            continue
        if current is not None:
            yield current[0], current[1], current[2], " ".join(current[3].split())
        current = [found[1], found[2], found[3], found[4]]
    if current is not None:
        yield current[0], current[1], current[2], " ".join(current[3].split())


def transactions_by_kind(url: str, since: Mark, until: Mark) -> dict[str, int]:
    """The same transactions, counted by their first statement's first words (to tell
    which part of the node sends them)."""
    name = url.rsplit("/", 1)[1]
    first: dict[str, str | None] = {}
    kinds: dict[str, int] = {}
    with SERVER_LOG.open(errors="replace") as log:
        log.seek(since.offset)
        lines = _statements(log)
        for found in lines:
            if found[2] != name or not since.time <= found[0] <= until.time:
                continue
            pid, statement = found[1], found[3]
            upper = statement.upper()
            if upper.startswith("BEGIN"):
                first[pid] = None
            elif upper.startswith(("COMMIT", "ROLLBACK")):
                kind = first.pop(pid, None) or "(empty)"
                kinds[kind] = kinds.get(kind, 0) + 1
            elif pid in first:
                if first[pid] is None and not upper.startswith(("SELECT SET_CONFIG", "SET ")):
                    first[pid] = statement[:70]
            else:
                kinds[statement[:70]] = kinds.get(statement[:70], 0) + 1
    return kinds


def clock() -> Mark:
    """Now: the log's length first, then the clock, so that every line before the
    offset is from before the time."""
    offset = SERVER_LOG.stat().st_size
    with psycopg.connect(harness.ADMIN_URL, autocommit=True) as connection:
        row = connection.execute(
            "SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'HH24:MI:SS.MS')"
        ).fetchone()
    assert row is not None
    return Mark(str(row[0]), offset)


def print_medians(results: Sequence[dict[str, float]], width: int, digits: int) -> None:
    """Each figure's median over the runs, then every run's value."""
    for key in results[0]:
        values = [result[key] for result in results]
        each = ", ".join(f"{value:.{digits}f}" for value in values)
        print(f"  {key:<{width}} {statistics.median(values):9.{digits}f}   ({each})")


def ratio(results: Sequence[dict[str, float]], this: str, baseline: str) -> float:
    """The median of `this` over the median of `baseline`."""
    base = statistics.median(r[baseline] for r in results)
    return statistics.median(r[this] for r in results) / base if base else float("nan")
