"""Alert events are delivered: taken by one node, settled, listed, pruned.

A try is taken like a console request, by a compare-and-set of `taken_by` (with
`taken_until`, so that a node that died while delivering hands the event on), and
settled fenced on (node, tries): a node whose hold ran out and was overtaken changes
nothing. A node reads the events of its own jobs by a join on its job set
(`store.job_sets`); an event of a job nobody has run for a while is `unrouted`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from scheduler.model import Event
from scheduler.states import Delivery, EventKind
from scheduler.store import job_sets
from scheduler.store.database import Database
from scheduler.store.events import EVENTS, trim


@dataclass(frozen=True)
class EventRow:
    """An event with where its delivery stands."""

    event: Event
    state: Delivery
    tries: int
    next_try_at: datetime
    taken_by: str | None
    taken_until: datetime | None
    delivered_at: datetime | None
    delivered_to: tuple[str, ...]
    last_error: str | None


_COLUMNS = (
    "job, period, kind, subject, run_id, attempt, reason, detail, streak, created_at, state,"
    " tries,"
    " next_try_at, taken_by, taken_until, delivered_at, delivered_to, last_error"
)


def _row(row: Any) -> EventRow:
    event = Event(
        job=row.job,
        period=row.period,
        kind=EventKind(row.kind),
        subject=row.subject,
        run_id=row.run_id,
        attempt=row.attempt,
        reason=row.reason,
        detail=row.detail,
        created_at=row.created_at,
        streak=row.streak,
    )
    return EventRow(
        event=event,
        state=Delivery(row.state),
        tries=row.tries,
        next_try_at=row.next_try_at,
        taken_by=row.taken_by,
        taken_until=row.taken_until,
        delivered_at=row.delivered_at,
        delivered_to=tuple(name for name in (row.delivered_to or "").split("\n") if name),
        last_error=row.last_error,
    )


def _free(database: Database) -> str:
    return f"(taken_until IS NULL OR taken_until < {database.now})"


def due(database: Database, job_set: str, limit: int = 50) -> list[EventRow]:
    """Pending events whose next try has come and that no live delivery holds, oldest
    first, of the jobs of the set `job_set` (a node delivers only what its own hooks
    know of; selected by a join on the set, so other jobs' events never crowd them out)."""
    statement = f"""
        SELECT {_COLUMNS} FROM {EVENTS} AS event
        WHERE state = 'pending' AND next_try_at <= {database.now} AND {_free(database)}
          AND {job_sets.member_of("event")}
        ORDER BY next_try_at, created_at LIMIT :limit
    """
    with database.transaction() as connection:
        found = connection.execute(statement, {"job_set": job_set, "limit": limit})
        return [_row(row) for row in found]


# The event's key (parameters from `_key`).
_KEY_SQL = "job = :job AND period = :period AND kind = :kind AND subject = :subject"


def _key(event: Event) -> dict[str, Any]:
    return {
        "job": event.job,
        "period": event.period,
        "kind": event.kind.value,
        "subject": event.subject,
    }


def take(database: Database, row: EventRow, node_id: str, hold_seconds: float) -> bool:
    """Take the event's next delivery try for this node; False if another node has it."""
    until, parameters = database.after("hold_s", hold_seconds)
    statement = f"""
        UPDATE {EVENTS} SET taken_by = :node, taken_until = {until}, tries = :next_tries
        WHERE {_KEY_SQL} AND state = 'pending' AND tries = :tries AND {_free(database)}
    """
    parameters |= {
        **_key(row.event),
        "node": node_id,
        "tries": row.tries,
        "next_tries": row.tries + 1,
    }
    with database.transaction() as connection:
        return connection.execute(statement, parameters).rowcount == 1


def settle(
    database: Database,
    row: EventRow,
    node_id: str,
    *,
    state: Delivery,
    delivered_to: Sequence[str],
    error: str | None,
    retry_in: float | None = None,
    hold_s: float | None = None,
) -> bool:
    """Record how the try this node took went: fenced on (node, tries), so a node whose
    hold ran out and was overtaken changes nothing. `hold_s`: a hook's call of this try
    still runs; the node keeps the event for that long (renewed with `renew`), so that
    no node calls the hook again meanwhile, and settles the try again once it ends."""
    values = [
        "state = :state",
        "delivered_to = :delivered_to",
        "last_error = :last_error",
    ]
    parameters: dict[str, Any] = {
        **_key(row.event),
        "state": state.value,
        "delivered_to": "\n".join(delivered_to) or None,
        "last_error": trim(error) if error else None,
        "node": node_id,
        "tries": row.tries + 1,
    }
    if state is Delivery.DELIVERED:
        values.append(f"delivered_at = {database.now}")
    if hold_s is None:
        values += ["taken_by = NULL", "taken_until = NULL"]
    else:
        until, more = database.after("hold_s", hold_s)
        values.append(f"taken_until = {until}")
        parameters |= more
    if retry_in is not None:
        later, more = database.after("retry_in", retry_in)
        values.append(f"next_try_at = {later}")
        parameters |= more
    statement = f"""
        UPDATE {EVENTS} SET {", ".join(values)}
        WHERE {_KEY_SQL} AND taken_by = :node AND tries = :tries
    """
    with database.transaction() as connection:
        return connection.execute(statement, parameters).rowcount == 1


def renew(database: Database, rows: Sequence[EventRow], node_id: str, hold_s: float) -> int:
    """Keep holding the events of tries this node took (each row as read before its try)
    whose hook calls still run; how many it still held."""
    until, parameters = database.after("hold_s", hold_s)
    statement = f"""
        UPDATE {EVENTS} SET taken_until = {until}
        WHERE {_KEY_SQL} AND taken_by = :node AND tries = :tries
    """
    held = 0
    with database.transaction() as connection:
        for row in rows:
            values = {**parameters, **_key(row.event), "node": node_id, "tries": row.tries + 1}
            held += connection.execute(statement, values).rowcount
    return held


def unroute_orphans(database: Database, after_s: float) -> Counter[str]:
    """Give the pending events of jobs nobody has run for `after_s` seconds (no node that
    may still run them knows them, nobody registered them) the terminal state
    `unrouted`, for retention to prune; how many, by job."""
    since, parameters = database.after("since", -after_s)
    statement = f"""
        UPDATE {EVENTS} SET state = '{Delivery.UNROUTED.value}', taken_by = NULL,
            taken_until = NULL, last_error = :why
        WHERE state = 'pending' AND {_free(database)}
          AND NOT {job_sets.known_since(EVENTS, since)}
        RETURNING job
    """
    why = f"no node has run the job for {after_s / 3600:g} h: nobody will deliver it"
    with database.transaction() as connection:
        jobs = connection.execute(statement, parameters | {"why": why}).scalars()
    return Counter(jobs)


def recent(
    database: Database,
    *,
    job: str | None = None,
    period: datetime | None = None,
    state: Delivery | None = None,
    limit: int = 50,
) -> list[EventRow]:
    """The newest events, of one job (and period) or of every job, in one state or all."""
    conditions = ["TRUE"]
    if job is not None:
        conditions.append("job = :job")
    if period is not None:
        conditions.append("period = :period")
    if state is not None:
        conditions.append("state = :state")
    statement = f"""
        SELECT {_COLUMNS} FROM {EVENTS} WHERE {" AND ".join(conditions)}
        ORDER BY created_at DESC, job LIMIT :limit
    """
    parameters = {
        "job": job,
        "period": period,
        "state": state.value if state else None,
        "limit": limit,
    }
    with database.transaction() as connection:
        return [_row(row) for row in connection.execute(statement, parameters)]


def count_by_state(database: Database) -> dict[str, int]:
    statement = f"SELECT state, count(*) FROM {EVENTS} GROUP BY state"
    with database.transaction() as connection:
        return {state: int(count) for state, count in connection.execute(statement)}


def _prunable() -> str:
    """Settled before the cutoff (`:cutoff`); a stuck item's event stays while the item
    is still claimed (the once-a-minute look would otherwise record, and send, it again)."""
    return f"""(created_at < :cutoff AND state <> 'pending'
        AND (kind <> '{EventKind.STUCK_ITEM.value}' OR NOT EXISTS (
            SELECT 1 FROM scheduler_items AS item
            WHERE item.job = {EVENTS}.job AND item.key = {EVENTS}.subject
              AND item.state = 'claimed')))"""


def prune(database: Database, cutoff: datetime, batch: int, *, dry_run: bool = False) -> int:
    """Delete (or count) one batch of settled events from before the cutoff."""
    if dry_run:
        with database.transaction() as connection:
            statement = f"SELECT count(*) FROM {EVENTS} WHERE {_prunable()}"
            return int(connection.execute(statement, {"cutoff": cutoff}).scalar())
    statement = f"""
        DELETE FROM {EVENTS} WHERE (job, period, kind, subject) IN (
            SELECT job, period, kind, subject FROM {EVENTS} WHERE {_prunable()} LIMIT :batch)
    """
    with database.transaction() as connection:
        return connection.execute(statement, {"cutoff": cutoff, "batch": batch}).rowcount


def next_due_query() -> str:
    """When the earliest pending event of the node's jobs may be tried: its next try, or
    the end of the hold a delivering node has on it (`:own_id` names the node)."""
    own = job_sets.member_of("event", job_sets.own_digest())
    return f"""SELECT min(CASE WHEN taken_until > next_try_at THEN taken_until
                              ELSE next_try_at END) AS free_at
               FROM {EVENTS} AS event WHERE state = 'pending' AND {own}"""


def seconds_to(moment: datetime | None, now: datetime) -> float | None:
    if moment is None:
        return None
    return (_as_utc(moment) - _as_utc(now)).total_seconds()


def _as_utc(moment: datetime | str) -> datetime:
    if isinstance(moment, str):  # an instant from SQLite's text, where it came back untyped
        moment = datetime.fromisoformat(moment)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
