"""`scheduler` with a statement counter: what the benchmarks start instead of the bare CLI.

PostgreSQL's pg_stat_statements needs `shared_preload_libraries` (a server restart), so
statements are counted at the driver instead: every `cursor.execute` SQLAlchemy sends is
one statement and one round trip; an `executemany` is one round trip and one statement
per parameter set (psycopg pipelines them); a multi-row INSERT is one statement. Commits
are counted as transactions. The counts go to the JSON file named by BENCH_STATEMENTS
every 0.2 s and at exit.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

FLUSH_S = 0.2
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
        event.listen(Engine, "before_cursor_execute", self._on_execute)
        event.listen(Engine, "commit", self._on_commit)
        threading.Thread(target=self._flush_forever, name="bench-counter", daemon=True).start()
        atexit.register(self.flush)

    def _on_execute(
        self,
        _connection: Any,
        _cursor: Any,
        statement: str,
        parameters: Any,
        _context: Any,
        executemany: bool,
    ) -> None:
        # SQLAlchemy's "insertmanyvalues" sends one multi-row INSERT with a flat dict of
        # parameters; a real executemany passes a list of parameter sets.
        many = executemany and isinstance(parameters, list | tuple)
        count = len(parameters) if many and parameters else 1
        words = statement.split(None, 1)
        table = _TABLE.search(statement)
        kind = f"{words[0].upper() if words else '?'} {table.group(1) if table else 'other'}"
        with self._lock:
            self.statements += count
            self.round_trips += 1
            self.kinds[kind] = self.kinds.get(kind, 0) + count

    def _on_commit(self, _connection: Any) -> None:
        with self._lock:
            self.transactions += 1

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
