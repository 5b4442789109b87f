"""The console as a WSGI application (Flask and Jinja2): pages, actions and the security
every response carries (Content-Security-Policy, no framing, no caching, gzip)."""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from typing import cast

import structlog
from flask import Flask, Response, current_app, g, request
from structlog.typing import FilteringBoundLogger

from scheduler.admin import Admin
from scheduler.config import DISTRIBUTION, version
from scheduler.console import grid
from scheduler.console.auth import Actor, Credentials, from_environment
from scheduler.schedules import Schedules
from scheduler.states import status_text
from scheduler.store.database import Database
from scheduler.views import duration_text, origin_text

# Scripts, styles and requests only from this console: an error message or a job name
# that smuggled markup past the escaping still could not run or load anything.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
GZIP_FROM_BYTES = 1024


@dataclass(frozen=True)
class Console:
    admin: Admin
    credentials: Credentials
    schedules: Schedules
    log: FilteringBoundLogger


def create_app(database: Database, credentials: Credentials | None = None) -> Flask:
    """The console for this database; credentials from the environment unless given."""
    from scheduler.console import actions, pages  # noqa: PLC0415 - they import this module

    app = Flask(__name__)
    app.extensions["scheduler"] = Console(
        Admin(database),
        credentials if credentials is not None else from_environment(),
        Schedules(database),
        structlog.get_logger("scheduler"),
    )
    app.register_blueprint(pages.blueprint)
    app.register_blueprint(actions.blueprint)
    app.before_request(_identify)
    app.after_request(_secure)
    app.jinja_env.filters.update(
        utc=grid.utc,
        duration=duration_text,
        status=status_text,
        origin=origin_text,
        arguments=grid.arguments,
    )
    app.context_processor(_page_context)
    return app


def console() -> Console:
    return cast(Console, current_app.extensions["scheduler"])


def actor() -> Actor | None:
    found: Actor | None = g.get("actor")
    return found


def _identify() -> None:
    credentials = console().credentials
    proxied = request.headers.get(credentials.user_header) if credentials.user_header else None
    g.actor = credentials.actor(request.headers.get("Authorization"), proxied)


def _page_context() -> dict[str, object]:
    who = actor()
    credentials = console().credentials
    return {
        "actor": who,
        "read_only": not credentials.configured,
        "form_token": credentials.form_token(who) if who else "",
        "legend": grid.LEGEND,
        "database_url": console().admin.database.display_url,
        "distribution": DISTRIBUTION,
        "version": version(),
    }


def _secure(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["X-Frame-Options"] = "DENY"
    # Not no-referrer: under it a browser sends `Origin: null` with its forms.
    response.headers["Referrer-Policy"] = "same-origin"
    if not request.path.startswith("/static/"):
        response.headers["Cache-Control"] = "no-store"
    return _compressed(response)


def _compressed(response: Response) -> Response:
    """Gzip a page when the browser takes it: the overview of 100 jobs is ~600 kB of
    cells, ~40 kB gzipped, fetched again every few seconds while open."""
    from scheduler.http import accepts_gzip  # noqa: PLC0415 - http imports the console lazily

    if response.direct_passthrough or "Content-Encoding" in response.headers:
        return response
    if not accepts_gzip(request.headers.get("Accept-Encoding")):
        return response
    body = response.get_data()
    if len(body) < GZIP_FROM_BYTES:
        return response
    response.set_data(gzip.compress(body, compresslevel=1))
    response.headers["Content-Encoding"] = "gzip"
    response.headers["Vary"] = "Accept-Encoding"
    return response
