"""The lease's renewal: one statement a heartbeat for every run a node holds.

Found by the holder's name, not by a list of ids, so a renewal also finds what the
node holds without knowing it (a claim or start whose reply was lost).
"""

from __future__ import annotations

from typing import Any

from scheduler.model import Held
from scheduler.states import Origin, RunStatus
from scheduler.store.connection import in_list
from scheduler.store.database import Connection, Database
from scheduler.store.fence import RUNS

# What a holder renews: not `queued`, whose lease is its message's deadline.
RENEWED_SQL = "'claimed', 'running', 'timed_out'"
_HELD_COLUMNS = "id, job, period, attempt, status, lease_seconds, origin, started_attempts"


def renew_leases(database: Database, holder: str) -> list[Held]:
    """Push forward every live lease held in this holder's name, and say which.

    Found by the name, not by a list of ids: a run this node claimed or started without
    hearing back (a lost reply) is found too, and the caller can adopt or release it. A
    lease that has already run out by the database clock is not renewed: the run is
    anyone's then, and its old holder must learn that it lost it. A `queued` run is not
    renewed: its lease is the deadline its message has to be picked up by a worker.
    """
    with database.batch_gate.renewal(), database.transaction() as connection:
        return renew_on(database, connection, holder)


def renew_on(database: Database, connection: Connection, holder: str) -> list[Held]:
    """`renew_leases` inside a transaction of the caller's (the heartbeat's beat), which
    entered `database.batch_gate.renewal()` before it began."""
    held = (
        f"holder = :holder AND live AND lease_expires_at >= {database.now}"
        f" AND status IN ({RENEWED_SQL})"
    )
    if database.arrays:
        # The rows are locked in id order first, the order a peer's takeover and a
        # hand-over to a task queue take them in: a renewal by the holder's name would
        # otherwise take them in the order it finds them and could deadlock with those,
        # which PostgreSQL breaks only after `deadlock_timeout`. The holder's own starts
        # and outcomes lock in no order: they wait for the renewal (`store.batch_gate`).
        statement = f"""
            UPDATE {RUNS} SET lease_expires_at = {database.lease_until("lease_seconds")}
            FROM (SELECT id AS locked_id FROM {RUNS} WHERE {held} ORDER BY id FOR UPDATE)
                 AS locked
            WHERE id = locked.locked_id AND {held} RETURNING {_HELD_COLUMNS}
        """
        return [_held(row) for row in connection.execute(statement, {"holder": holder})]
    found = [
        _held(row)
        for row in connection.execute(
            f"SELECT {_HELD_COLUMNS} FROM {RUNS} WHERE {held}",
            {"holder": holder},
        )
    ]
    # SQLite's times are values: one statement per lease length.
    for seconds in {row.lease_seconds for row in found}:
        ids, parameters = in_list("id", [row.id for row in found if row.lease_seconds == seconds])
        lease, leased = database.lease("lease_s", seconds)
        connection.execute(
            f"UPDATE {RUNS} SET lease_expires_at = {lease} WHERE id IN ({ids}) AND {held}",
            {**parameters, **leased, "holder": holder},
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
