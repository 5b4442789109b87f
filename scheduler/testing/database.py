"""A harness's database: a file of its own in a temporary folder, copied from one
migrated template per process (migrating takes longer than every test that uses it)."""

from __future__ import annotations

import shutil
import tempfile
import threading
from dataclasses import replace
from pathlib import Path

from scheduler.instants import TimeSource
from scheduler.store import migrate
from scheduler.store.database import Database, open_database

_template: Path | None = None
_template_lock = threading.Lock()


def _migrated_template() -> Path:
    global _template  # noqa: PLW0603 - one template per process, made on first use
    with _template_lock:
        if _template is None or not _template.exists():
            folder = Path(tempfile.mkdtemp(prefix="scheduler-testing-template-"))
            path = folder / "template.db"
            database = open_database(f"sqlite:///{path}", must_exist=False)
            try:
                migrate.upgrade(database)
            finally:
                database.dispose()
            _template = path
        return _template


def fresh_database(folder: Path, time_source: TimeSource) -> tuple[Database, str]:
    """A migrated SQLite database in `folder` whose clock is `time_source`, and its URL
    (for the application code of the jobs under test)."""
    path = folder / "scheduler.db"
    shutil.copyfile(_migrated_template(), path)
    url = f"sqlite:///{path}"
    return replace(open_database(url, durable=False), time_source=time_source), url
