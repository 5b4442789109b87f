"""Database URLs: which backend, where, and how to show it without its password.

Read with the standard library: a read-only command or a node must not load a SQL
toolkit to learn that `sqlite:///scheduler.db` is a file. PostgreSQL URLs go to libpq
as they are (with the scheme made plain), so every libpq parameter a user puts in the
query string (`sslmode`, `host=/run/postgresql`, several hosts) keeps working.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import SplitResult, unquote, urlsplit

from scheduler.errors import UserError

# What hosting platforms hand out (`postgres://`, Heroku and others) is PostgreSQL too.
POSTGRES_ALIASES = ("postgresql", "postgres")
DEFAULT_PORT = 5432
_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][\w.+-]*)://(?P<rest>.*)$", re.DOTALL)


@dataclass(frozen=True)
class DatabaseURL:
    """A URL the scheduler can serve: `backend` is `sqlite` or `postgresql`."""

    backend: str
    # PostgreSQL: the URL as libpq takes it (`postgresql://…`), password included.
    conninfo: str = ""
    # SQLite: the file's path, as given (relative to the working directory or absolute).
    path: str = ""

    @property
    def is_postgres(self) -> bool:
        return self.backend == "postgresql"

    @property
    def port(self) -> int:
        """The port the URL names (PostgreSQL's default when it names none)."""
        try:
            return urlsplit(self.conninfo).port or DEFAULT_PORT
        except ValueError:  # several hosts (`h1:5432,h2:5433`): no single port
            return DEFAULT_PORT

    def with_password(self) -> str:
        """The URL whole, for a process of our own to open the same database (a job's
        child process); never for a log line."""
        return self.conninfo if self.is_postgres else f"sqlite:///{self.path}"

    def display(self) -> str:
        """The URL for a log line or a page: the password, if any, as `***`."""
        if not self.is_postgres:
            return f"sqlite:///{self.path}"
        return _without_password(urlsplit(self.conninfo)).geturl()

    def sqlalchemy(self) -> str:
        """The URL as SQLAlchemy names it (for the migrations, which Alembic runs)."""
        if not self.is_postgres:
            return f"sqlite:///{self.path}"
        return "postgresql+psycopg://" + self.conninfo.split("://", 1)[1]


def parse_database_url(raw: str) -> DatabaseURL:
    """Normalise the URL the user gave and refuse the ones we cannot serve."""
    match = _SCHEME.match(raw.strip())
    if match is None:
        raise UserError(
            f"--database-url: cannot parse {raw!r} "
            "(expected sqlite:///path.db or postgresql://user@host/db)"
        )
    backend, _, driver = match["scheme"].lower().partition("+")
    rest = match["rest"]
    if backend in POSTGRES_ALIASES:
        if driver not in ("", "psycopg"):
            raise UserError(
                f"--database-url: use postgresql:// or postgresql+psycopg:// (psycopg 3); "
                f"{driver} is not installed"
            )
        return DatabaseURL("postgresql", conninfo=f"postgresql://{rest}")
    if backend == "sqlite":
        path = unquote(rest.split("?", 1)[0])
        # sqlite:///relative.db and sqlite:////absolute.db, as SQLAlchemy reads them.
        path = path[1:] if path.startswith("/") else path
        if not path or path == ":memory:":
            raise UserError(
                "--database-url: an in-memory SQLite database cannot be shared; "
                "give a file, e.g. sqlite:///scheduler.db"
            )
        return DatabaseURL("sqlite", path=path)
    raise UserError(f"--database-url: unsupported database {backend!r} (use sqlite or postgresql)")


def _without_password(parts: SplitResult) -> SplitResult:
    if parts.password is None:
        return parts
    user, _, host = parts.netloc.rpartition("@")
    name = user.split(":", 1)[0]
    return parts._replace(netloc=f"{name}:***@{host}")
