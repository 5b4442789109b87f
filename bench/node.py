"""`scheduler` with a statement counter: what the benchmarks start instead of the bare CLI.

PostgreSQL's pg_stat_statements needs `shared_preload_libraries` (a server restart), so
statements are counted at the store's connection instead: every `execute` is one round
trip, of the statements its text holds (`BEGIN; SELECT …` holds one: BEGIN, COMMIT and
ROLLBACK are not counted as statements, as they never were); a `pipeline` is one round
trip of its statements; an `execute_many` is one round trip and one statement per
parameter set (psycopg pipelines them). Each COMMIT
counts a transaction. The counts go to the JSON file named by BENCH_STATEMENTS every
0.2 s and at exit.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from scheduler.store.connection import Connection, Result

FLUSH_S = 0.2
_CONTROL = frozenset({"BEGIN", "COMMIT", "ROLLBACK"})
_TABLE = re.compile(r"\b(scheduler_\w+|pg_advisory_xact_lock|statement_timestamp|alembic_version)")


class StatementCounter:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self.statements = 0
        self.round_trips = 0
        self.transactions = 0
        self.kinds: dict[str, int] = {}

    def install(self) -> None:
        """Count what every store connection of this process sends (the store's
        statements on a job's own connection included)."""
        counter = self
        execute, execute_many = Connection.execute, Connection.execute_many
        pipeline = Connection.pipeline

        def counted(
            self: Connection, sql: str, parameters: Mapping[str, Any] | None = None
        ) -> Result:
            # Only a text without parameters may hold several statements.
            counter.sent(sql.split(";") if parameters is None else [sql], 1)
            return execute(self, sql, parameters)

        def counted_many(self: Connection, sql: str, rows: Sequence[Mapping[str, Any]]) -> None:
            if rows:
                counter.sent([sql], len(rows))
            execute_many(self, sql, rows)

        def counted_pipeline(
            self: Connection, statements: Sequence[tuple[str, Mapping[str, Any] | None]]
        ) -> list[Result]:
            counter.sent([sql for sql, _ in statements], 1)
            return pipeline(self, statements)

        Connection.execute = counted  # type: ignore[method-assign]
        Connection.execute_many = counted_many  # type: ignore[method-assign]
        Connection.pipeline = counted_pipeline  # type: ignore[method-assign]
        threading.Thread(target=self._flush_forever, name="bench-counter", daemon=True).start()
        atexit.register(self.flush)

    def sent(self, statements: list[str], times: int) -> None:
        """One round trip of `statements`, each sent `times` times."""
        with self._lock:
            self.round_trips += 1
            for statement in filter(str.strip, statements):
                verb = statement.split(None, 1)[0].upper()
                if verb in _CONTROL:
                    self.transactions += verb == "COMMIT"
                    continue
                table = _TABLE.search(statement)
                kind = f"{verb} {table.group(1) if table else 'other'}"
                self.statements += times
                self.kinds[kind] = self.kinds.get(kind, 0) + times

    def _flush_forever(self) -> None:
        while True:
            time.sleep(FLUSH_S)
            self.flush()

    def flush(self) -> None:
        with self._lock:
            document = {
                "at": time.time(),
                "statements": self.statements,
                "round_trips": self.round_trips,
                "transactions": self.transactions,
                "kinds": dict(self.kinds),
            }
        temporary = self._path.with_suffix(".tmp")
        temporary.write_text(json.dumps(document))
        temporary.replace(self._path)


def main() -> None:
    target = os.environ.get("BENCH_STATEMENTS")
    if target:
        StatementCounter(Path(target)).install()
    from scheduler.cli import main as scheduler_main  # noqa: PLC0415 - after the hooks

    sys.exit(scheduler_main(prog_name="scheduler"))


if __name__ == "__main__":
    main()
