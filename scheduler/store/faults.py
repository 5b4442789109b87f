"""The store's own errors: what its callers may catch, without knowing the driver.

Every transaction of the store turns a driver or SQLAlchemy error into one of two:

- `StoreUnavailableError`: the database did not answer (a lost connection, a pool that ran
  dry, a timeout): the same request may succeed later, so callers back off and retry;
- `StoreRejectedError`: the database refused this request, or it could not be sent as it
  is (a constraint, a value no driver encodes): retrying it unchanged fails again.

`message` is the driver's own first line, for a log field or a CLI error.
"""

from __future__ import annotations

from sqlalchemy.exc import (
    DBAPIError,
    DisconnectionError,
    InterfaceError,
    OperationalError,
    SQLAlchemyError,
    TimeoutError,
)

# Raised from inside a statement by the driver itself (not wrapped by SQLAlchemy), for
# a value it cannot send: a lone surrogate in a text.
UNSENDABLE = (UnicodeError,)


class StoreError(Exception):
    """A database fault, in one line."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class StoreUnavailableError(StoreError):
    """The database did not answer; the same request may succeed later."""


class StoreRejectedError(StoreError):
    """The database refused this request (or it could not be sent as it is)."""


def translate(error: BaseException) -> StoreError:
    """The store's error for a driver's, SQLAlchemy's or an unsendable value's."""
    message = first_line(getattr(error, "orig", None) or error)
    if isinstance(error, UNSENDABLE):
        return StoreRejectedError(message)
    if isinstance(error, OperationalError | InterfaceError | DisconnectionError | TimeoutError):
        return StoreUnavailableError(message)
    if isinstance(error, DBAPIError):
        return (
            StoreUnavailableError(message)
            if error.connection_invalidated
            else StoreRejectedError(message)
        )
    if isinstance(error, SQLAlchemyError) and isinstance(error.__cause__, UNSENDABLE):
        return StoreRejectedError(message)
    return StoreUnavailableError(message)


def first_line(error: object) -> str:
    """A driver's message, squeezed to one line for a log field or a CLI error."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
