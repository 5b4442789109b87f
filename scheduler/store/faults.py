"""The store's own errors: what its callers may catch, without knowing the driver.

Every call of the store turns a driver's error into one of two:

- `StoreUnavailableError`: the database did not answer (a lost connection, a pool that ran
  dry, a timeout, a lock it waited too long for): the same request may succeed later, so
  callers back off and retry;
- `StoreRejectedError`: the database refused this request, or it could not be sent as it
  is (a constraint, a value no driver encodes): retrying it unchanged fails again.

`message` is the driver's own first line, for a log field or a CLI error. The drivers
are told apart by their module, so that neither is imported here: a node on SQLite
never loads psycopg.
"""

from __future__ import annotations

import sqlite3
import sys

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
    """The server accepts no connection at all (starting, stopping, not listening):
    every session of every node is down with it."""


class StoreRejectedError(StoreError):
    """The database refused this request (or it could not be sent as it is)."""


def driver_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a driver in use may raise (psycopg's only once it is loaded)."""
    psycopg = sys.modules.get("psycopg")
    found: tuple[type[BaseException], ...] = (sqlite3.Error, *UNSENDABLE)
    return (*found, psycopg.Error) if psycopg is not None else found


def translate(error: BaseException, *, connection_lost: bool = False) -> StoreError:
    """The store's error for a driver's or an unsendable value's.

    `connection_lost`: the connection the error came from is closed or broken, so
    whatever the error says, the request never got an answer.
    """
    message = first_line(error)
    if isinstance(error, UNSENDABLE):
        return StoreRejectedError(message)
    if connection_lost or isinstance(error, sqlite3.OperationalError):
        # SQLite: a busy database (its lock waited for too long) or a file gone.
        return StoreUnavailableError(message)
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None and isinstance(error, psycopg.Error):
        if isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
            return StoreUnavailableError(message)
        return StoreRejectedError(message)
    if isinstance(error, sqlite3.Error):
        return StoreRejectedError(message)
    return StoreUnavailableError(message)


def first_line(error: object) -> str:
    """A driver's message, squeezed to one line for a log field or a CLI error."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
