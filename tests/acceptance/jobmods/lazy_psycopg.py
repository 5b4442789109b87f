"""Jobs that import psycopg only when they run, on a node on SQLite (which never loads
the driver itself), as an application's code does when it reaches its own PostgreSQL.

The import is slowed down, as a cold disk or a network file system slows it: a finder
waits PSYCOPG_IMPORT_DELAY seconds before psycopg's first submodule is looked up, so for
that long `psycopg` is in `sys.modules` half initialised (no `Error` yet) while the
node's side threads go on using the store. Every execution writes a line as evidence.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from scheduler import RunContext, job

DELAY_S = float(os.environ.get("PSYCOPG_IMPORT_DELAY", "2"))


class _SlowDriverImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: only waits before psycopg.pq is found by the real finders."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == "psycopg.pq":
            time.sleep(DELAY_S)
        return None


sys.meta_path.insert(0, _SlowDriverImport())


def _query(ctx: RunContext) -> None:
    already = "psycopg" in sys.modules
    import psycopg  # noqa: PLC0415 - the lazy import under test

    assert psycopg.Error is not None
    with Path(os.environ["EXECUTION_LOG"]).open("a") as log:
        log.write(f"{ctx.period.isoformat()} {ctx.node} {ctx.attempt} {already}\n")


# Several every-second jobs, so that each of three nodes owns some (peers share jobs out
# by a hash of their names) and imports psycopg in a run of its own.
report_a = job(cron="* * * * * *", name="report_a")(_query)
report_b = job(cron="* * * * * *", name="report_b")(_query)
report_c = job(cron="* * * * * *", name="report_c")(_query)
report_d = job(cron="* * * * * *", name="report_d")(_query)
report_e = job(cron="* * * * * *", name="report_e")(_query)
report_f = job(cron="* * * * * *", name="report_f")(_query)
