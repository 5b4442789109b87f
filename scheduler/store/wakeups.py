"""Wake-ups: what one node's write tells the others at once (PostgreSQL NOTIFY), so that
nobody has to ask the database every second whether something changed.

A notification travels with the transaction that made the change (sent at its
commit, dropped with its rollback) on one channel, as `kind` or `kind:seconds`:

- `recovery:S`: a run may be taken over in S seconds (a retry was scheduled, a lease
  was ended or released, a paused job resumed);
- `request`: an operator request waits for a node;
- `gone`: a node's liveness lock went (see `store.liveness.PeerWatch`).

Notifications are a shortcut, never the record: a node that misses one (its listening
session dropped at that moment, or it sits behind a pooler that cannot LISTEN) still
finds the change on its next heartbeat, which reads every such deadline.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import Connection, text

from scheduler.store.database import Database

CHANNEL = "scheduler"


class Wake(StrEnum):
    RECOVERY = "recovery"
    REQUEST = "request"
    GONE = "gone"


@dataclass(frozen=True)
class Heard:
    """One notification, parsed: its kind, and in how many seconds (0: now)."""

    kind: Wake
    after: float = 0.0


def notify_on(database: Database, connection: Connection, kind: Wake, after: float = 0.0) -> None:
    """Tell the other nodes, when this transaction commits (PostgreSQL only)."""
    if not database.notifies:
        return
    payload = f"{kind.value}:{after:g}" if after else kind.value
    connection.execute(
        text("SELECT pg_notify(:channel, :payload)"), {"channel": CHANNEL, "payload": payload}
    )


def parse(payload: str) -> Heard | None:
    """A notification's payload, or None for one this version does not know."""
    kind, _, after = payload.partition(":")
    try:
        return Heard(Wake(kind), max(0.0, float(after)) if after else 0.0)
    except ValueError:
        return None


# The recovery wake carried inside the batched finish (see `store.writes`): a notify per
# outcome that schedules a retry, in the same statement, so no extra round trip.
RETRY_NOTIFY_SQL = (
    f"CASE WHEN done.retry_in IS NOT NULL THEN pg_notify('{CHANNEL}', "
    f"'{Wake.RECOVERY.value}:' || done.retry_in::text) END"
)


def announce(database: Database, kind: Wake) -> None:
    """Tell the other nodes on its own (a watcher saw a node go)."""
    with database.transaction() as connection:
        notify_on(database, connection, kind)
