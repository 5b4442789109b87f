"""The lease's renewal: one statement a heartbeat for every run a node holds.

Found by the holder's name, not by a list of ids, so a renewal also finds what the
node holds without knowing it (a claim or start whose reply was lost).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, and_, select, update

from scheduler.model import Held
from scheduler.states import Origin, RunStatus
from scheduler.store.database import Database
from scheduler.store.schema import runs

# What a holder renews: not `queued`, whose lease is its message's deadline.
RENEWED = [RunStatus.CLAIMED.value, RunStatus.RUNNING.value, RunStatus.TIMED_OUT.value]
_HELD_COLUMNS = (
    runs.c.id,
    runs.c.job,
    runs.c.period,
    runs.c.attempt,
    runs.c.status,
    runs.c.lease_seconds,
    runs.c.origin,
    runs.c.started_attempts,
)


def renew_leases(database: Database, holder: str) -> list[Held]:
    """Push forward every live lease held in this holder's name, and say which.

    Found by the name, not by a list of ids: a run this node claimed or started without
    hearing back (a lost reply) is found too, and the caller can adopt or release it. A
    lease that has already run out by the database clock is not renewed: the run is
    anyone's then, and its old holder must learn that it lost it. A `queued` run is not
    renewed: its lease is the deadline its message has to be picked up by a worker.
    """
    with database.transaction() as connection:
        return renew_on(database, connection, holder)


def renew_on(database: Database, connection: Connection, holder: str) -> list[Held]:
    """`renew_leases` inside a transaction of the caller's (the heartbeat's beat)."""
    now = database.now()
    held = and_(
        runs.c.holder == holder,
        runs.c.lease_expires_at >= now,
        runs.c.status.in_(RENEWED),
    )
    if database.arrays:
        statement = (
            update(runs)
            .where(held)
            .values(lease_expires_at=database.lease_until(runs.c.lease_seconds))
            .returning(*_HELD_COLUMNS)
        )
        return [_held(row) for row in connection.execute(statement)]
    found = [_held(row) for row in connection.execute(select(*_HELD_COLUMNS).where(held))]
    for seconds in {row.lease_seconds for row in found}:
        ids = [row.id for row in found if row.lease_seconds == seconds]
        connection.execute(
            update(runs)
            .where(runs.c.id.in_(ids), held)
            .values(lease_expires_at=database.lease_until(seconds))
        )
    return found


def _held(row: Any) -> Held:
    return Held(
        row.id,
        row.job,
        row.period,
        row.attempt,
        RunStatus(row.status),
        row.lease_seconds,
        Origin(row.origin),
        row.started_attempts,
    )
