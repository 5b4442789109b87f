"""Wake-ups: what one node's write tells the others at once (PostgreSQL NOTIFY), so that
nobody has to ask the database every second whether something changed.

A notification travels with the transaction that made the change (sent at its
commit, dropped with its rollback) on one channel, as `kind` or `kind:seconds`:

- `recovery:S`: a run may be taken over in S seconds (a retry was scheduled, a lease
  was ended or released, a paused job resumed);
- `request`: an operator request waits for a node;
- `alert`: an alert event was born (a hook has something to hear);
- `gone`: a node's liveness lock went (see `store.liveness.PeerWatch`);
- `claimed:TOKENS`: these periods were claimed (a few at a time), so that the peers
  whose share they were not need not read whether they were (see `node.peers`);
- `schedule:S`: a schedule created at run time, created or changed, falls due in S
  seconds (`store.schedules`).

Notifications are a shortcut, never the record: a node that misses one (its listening
session dropped at that moment, or it sits behind a pooler that cannot LISTEN) still
finds the change on its next heartbeat, which reads every such deadline.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from itertools import islice

from scheduler.model import lock_key
from scheduler.store.database import Connection, Database

CHANNEL = "scheduler"


class Wake(StrEnum):
    RECOVERY = "recovery"
    REQUEST = "request"
    GONE = "gone"
    ALERT = "alert"
    CLAIMED = "claimed"
    SCHEDULE = "schedule"
    # An operator chose to run periods deferred by a catch-up budget.
    CATCHUP = "catchup"


@dataclass(frozen=True)
class Heard:
    """One notification, parsed: its kind, and in how many seconds (0: now)."""

    kind: Wake
    after: float = 0.0
    # `claimed`: the periods' tokens (see `claimed_token`).
    tokens: frozenset[str] = frozenset()


def notify_on(database: Database, connection: Connection, kind: Wake, after: float = 0.0) -> None:
    """Tell the other nodes, when this transaction commits (PostgreSQL only)."""
    if not database.notifies:
        return
    payload = f"{kind.value}:{after:g}" if after else kind.value
    connection.execute(
        "SELECT pg_notify(:channel, :payload)", {"channel": CHANNEL, "payload": payload}
    )


def parse(payload: str) -> Heard | None:
    """A notification's payload, or None for one this version does not know."""
    kind, _, after = payload.partition(":")
    if kind == Wake.CLAIMED.value:
        return Heard(Wake.CLAIMED, tokens=frozenset(after.split(",")) - {""})
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


def alert_notify_sql(born: str) -> str:
    """The alert wake carried inside the batched finish: sent once if the statement gave
    birth to any event (`born`: a relation with a row per event inserted)."""
    return f"SELECT pg_notify('{CHANNEL}', '{Wake.ALERT.value}') FROM {born} LIMIT 1"


# A claim that won more periods than this says nothing (a payload holds 8,000 bytes);
# the peers then read what is left of their shares, as without notifications.
CLAIMED_AT_MOST = 100


def claimed_token(job: str, period: datetime) -> str:
    """A period, short: the job's 64-bit lock key and the period in milliseconds."""
    return f"{lock_key(job) & 0xFFFFFFFFFFFFFFFF:x}@{round(period.timestamp() * 1000)}"


def notify_claimed(
    database: Database, connection: Connection, won: Iterable[tuple[str, datetime]]
) -> None:
    """Tell the peers which periods this transaction claims (at its commit)."""
    if not database.notifies:
        return
    tokens = [claimed_token(job, period) for job, period in islice(won, CLAIMED_AT_MOST + 1)]
    if not tokens or len(tokens) > CLAIMED_AT_MOST:
        return
    connection.execute(
        "SELECT pg_notify(:channel, :payload)",
        {"channel": CHANNEL, "payload": f"{Wake.CLAIMED.value}:{','.join(tokens)}"},
    )


def announce(database: Database, kind: Wake) -> None:
    """Tell the other nodes on its own (a watcher saw a node go)."""
    with database.transaction() as connection:
        notify_on(database, connection, kind)
