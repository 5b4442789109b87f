"""`manage.py migrate` brings the scheduler's tables to this version's head.

The scheduler's schema is Alembic's (`scheduler.store.migrate`, the same revisions
`scheduler migrate` applies), so no Django migration copies it: after Django's own
migrations, the `post_migrate` signal of this app runs the scheduler's upgrade on the
database Django migrated, when it is the scheduler's. A project that upgrades the
scheduler so gets its new revisions from the `migrate` it already runs at each deploy.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import CommandError

from scheduler.django.settings import database_url, in_memory, scheduler_settings
from scheduler.errors import UserError
from scheduler.store import migrate
from scheduler.store.database import open_database


def migrate_after_django(*, using: str, verbosity: int = 1, plan: Any = None, **_: Any) -> None:
    """post_migrate: upgrade the scheduler's tables on `using` if it is its database. A
    mistake (an engine it cannot use, a schema newer than this version) is one line
    from `migrate`, as Django says its own."""
    del plan
    try:
        line = _upgrade(using)
    except UserError as error:
        raise CommandError(str(error)) from None
    if line and verbosity >= 1:
        print(f"  Scheduler tables: {line}")


def _upgrade(using: str) -> str | None:
    """What the upgrade did, in words; None when `using` is not the scheduler's."""
    scheduler = scheduler_settings(getattr(settings, "SCHEDULER", None))
    if using != scheduler.get("DATABASE", "default"):
        return None
    if "DATABASE_URL" not in scheduler and in_memory(settings.DATABASES[using]):
        return "skipped, an in-memory SQLite database cannot hold them"
    database = open_database(database_url(settings.DATABASES, scheduler), must_exist=False)
    try:
        before = migrate.upgrade(database)
        after = migrate.current_revision(database)
    finally:
        database.dispose()
    if before == after:
        return f"at revision {after}, nothing to do"
    return f"upgraded from {before} to {after}"
