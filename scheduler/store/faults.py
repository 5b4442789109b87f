"""The store's own errors: what its callers may catch, without knowing the driver.

Every call of the store turns a driver's error into one of two:

- `StoreUnavailableError`: the database did not answer (a lost connection, a pool that ran
  dry, a timeout, a lock it waited too long for): the same request may succeed later, so
  callers back off and retry;
- `StoreRejectedError`: the database refused this request, or it could not be sent as it
  is (a constraint, a value no driver encodes): retrying it unchanged fails again.

`message` is the driver's own first line, for a log field or a CLI error. Which driver's
errors to expect is the database's backend, never whatever `sys.modules` holds: a node on
SQLite never loads psycopg, and must not look at it while a job's thread imports it (a
half-initialised module has no `Error` yet, and reading it killed a side thread).
"""

from __future__ import annotations

import functools
import sqlite3

# Raised from inside a statement by the driver itself, for a value it cannot send: a
# lone surrogate in a text.
UNSENDABLE = (UnicodeError,)


class StoreError(Exception):
    """A database fault, in one line."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class StoreUnavailableError(StoreError):
    """The database did not answer; the same request may succeed later."""


class ServerDownError(StoreUnavailableError):
    """No server serves a new connection (refused, closed before it spoke, a timeout,
    starting or stopping), as opposed to one that answers and turns it away."""


class StoreRejectedError(StoreError):
    """The database refused this request (or it could not be sent as it is)."""


@functools.cache
def driver_errors(postgres: bool) -> tuple[type[BaseException], ...]:
    """The exceptions the driver of a database may raise: psycopg's only on PostgreSQL,
    whose opening imported it in full (an import here waits for one under way)."""
    found: tuple[type[BaseException], ...] = (sqlite3.Error, *UNSENDABLE)
    if not postgres:
        return found
    import psycopg  # noqa: PLC0415 - loaded by then: the database opened with it

    return (*found, psycopg.Error)


def translate(error: BaseException, *, postgres: bool, connection_lost: bool = False) -> StoreError:
    """The store's error for a driver's or an unsendable value's, from a database on
    PostgreSQL (`postgres`) or SQLite.

    `connection_lost`: the connection the error came from is closed or broken, so
    whatever the error says, the request never got an answer.
    """
    message = first_line(error)
    if isinstance(error, UNSENDABLE):
        return StoreRejectedError(message)
    if connection_lost or isinstance(error, sqlite3.OperationalError):
        # SQLite: a busy database (its lock waited for too long) or a file gone.
        return StoreUnavailableError(message)
    if postgres:
        import psycopg  # noqa: PLC0415 - see driver_errors

        if isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
            return StoreUnavailableError(message)
        if isinstance(error, psycopg.Error):
            return StoreRejectedError(message)
    if isinstance(error, sqlite3.Error):
        return StoreRejectedError(message)
    return StoreUnavailableError(message)


def first_line(error: object) -> str:
    """A driver's message, squeezed to one line for a log field or a CLI error."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
