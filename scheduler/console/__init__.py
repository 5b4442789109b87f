"""The web console: the runs table as pages (overview grid, job, run, nodes, requests)
and the operator actions, served by `scheduler run --http` beside /metrics and by
`scheduler console` against the database alone.

It needs the `console` extra (`pip install 'cronclaim[console]'`: Flask and Jinja2);
the daemon's own install stays without it, and `load` says so by returning None.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scheduler.store.database import Database

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIApplication

INSTALL_HINT = "pip install 'cronclaim[console]'"


def load(database: Database) -> WSGIApplication | None:
    """The console for this database, or None when the extra is not installed."""
    try:
        from scheduler.console.app import create_app  # noqa: PLC0415 - optional extra
    except ImportError:
        return None
    return create_app(database)


def check_settings() -> None:
    """Refuse a malformed credentials variable in one line, when the extra is installed."""
    try:
        from scheduler.console.auth import from_environment  # noqa: PLC0415 - optional extra
    except ImportError:
        return
    from_environment()
