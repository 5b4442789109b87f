"""Alert events are delivered: taken by one node, settled, listed, pruned.

A try is taken like a console request, by a compare-and-set of `taken_by` (with
`taken_until`, so that a node that died while delivering hands the event on), and
settled fenced on (node, tries): a node whose hold ran out and was overtaken changes
nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Select,
    and_,
    case,
    delete,
    exists,
    func,
    or_,
    select,
    tuple_,
    update,
)

from scheduler.model import Event
from scheduler.states import Delivery, EventKind
from scheduler.store.database import Database
from scheduler.store.events import trim
from scheduler.store.schema import events, items


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


_COLUMNS = [
    events.c[name]
    for name in (
        "job",
        "period",
        "kind",
        "subject",
        "run_id",
        "attempt",
        "reason",
        "detail",
        "created_at",
        "state",
        "tries",
        "next_try_at",
        "taken_by",
        "taken_until",
        "delivered_at",
        "delivered_to",
        "last_error",
    )
]


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


def _free(database: Database) -> Any:
    return or_(events.c.taken_until.is_(None), events.c.taken_until < database.now())


def due(database: Database, jobs: Collection[str], limit: int = 50) -> list[EventRow]:
    """Pending events whose next try has come and that no live delivery holds, oldest
    first, of the jobs given (a node delivers only what its own hooks know of)."""
    statement = (
        select(*_COLUMNS)
        .where(
            events.c.state == Delivery.PENDING.value,
            events.c.next_try_at <= database.now(),
            _free(database),
        )
        .order_by(events.c.next_try_at, events.c.created_at)
        .limit(limit * 10)
    )
    known = set(jobs)
    with database.transaction() as connection:
        rows = [_row(row) for row in connection.execute(statement)]
    return [row for row in rows if row.event.job in known][:limit]


def _key(event: Event) -> Any:
    return and_(
        events.c.job == event.job,
        events.c.period == event.period,
        events.c.kind == event.kind.value,
        events.c.subject == event.subject,
    )


def take(database: Database, row: EventRow, node_id: str, hold_seconds: float) -> bool:
    """Take the event's next delivery try for this node; False if another node has it."""
    statement = (
        update(events)
        .where(
            _key(row.event),
            events.c.state == Delivery.PENDING.value,
            events.c.tries == row.tries,
            _free(database),
        )
        .values(taken_by=node_id, taken_until=database.now_plus(hold_seconds), tries=row.tries + 1)
    )
    with database.transaction() as connection:
        return connection.execute(statement).rowcount == 1


def settle(
    database: Database,
    row: EventRow,
    node_id: str,
    *,
    state: Delivery,
    delivered_to: Sequence[str],
    error: str | None,
    retry_in: float | None = None,
) -> bool:
    """Record how the try this node took went: fenced on (node, tries), so a node whose
    hold ran out and was overtaken changes nothing."""
    values: dict[str, Any] = {
        "state": state.value,
        "delivered_to": "\n".join(delivered_to) or None,
        "last_error": trim(error) if error else None,
        "taken_by": None,
        "taken_until": None,
    }
    if state is Delivery.DELIVERED:
        values["delivered_at"] = database.now()
    if retry_in is not None:
        values["next_try_at"] = database.now_plus(retry_in)
    statement = (
        update(events)
        .where(_key(row.event), events.c.taken_by == node_id, events.c.tries == row.tries + 1)
        .values(**values)
    )
    with database.transaction() as connection:
        return connection.execute(statement).rowcount == 1


def recent(
    database: Database,
    *,
    job: str | None = None,
    period: datetime | None = None,
    state: Delivery | None = None,
    limit: int = 50,
) -> list[EventRow]:
    """The newest events, of one job (and period) or of every job, in one state or all."""
    statement = select(*_COLUMNS).order_by(events.c.created_at.desc(), events.c.job).limit(limit)
    if job is not None:
        statement = statement.where(events.c.job == job)
    if period is not None:
        statement = statement.where(events.c.period == period)
    if state is not None:
        statement = statement.where(events.c.state == state.value)
    with database.transaction() as connection:
        return [_row(row) for row in connection.execute(statement)]


def count_by_state(database: Database) -> dict[str, int]:
    statement = select(events.c.state, func.count()).group_by(events.c.state)
    with database.transaction() as connection:
        return {state: int(count) for state, count in connection.execute(statement)}


def _prunable(cutoff: datetime) -> Any:
    """Settled before the cutoff; a stuck item's event stays while the item is still
    claimed (the once-a-minute look would otherwise record, and send, it again)."""
    still_stuck = exists().where(
        items.c.job == events.c.job,
        items.c.key == events.c.subject,
        items.c.state == "claimed",
    )
    return and_(
        events.c.created_at < cutoff,
        events.c.state != Delivery.PENDING.value,
        or_(events.c.kind != EventKind.STUCK_ITEM.value, ~still_stuck),
    )


def prune(database: Database, cutoff: datetime, batch: int, *, dry_run: bool = False) -> int:
    """Delete (or count) one batch of settled events from before the cutoff."""
    if dry_run:
        with database.transaction() as connection:
            statement = select(func.count()).select_from(events).where(_prunable(cutoff))
            return int(connection.execute(statement).scalar_one())
    key = tuple_(events.c.job, events.c.period, events.c.kind, events.c.subject)
    chosen = (
        select(events.c.job, events.c.period, events.c.kind, events.c.subject)
        .where(_prunable(cutoff))
        .limit(batch)
    )
    with database.transaction() as connection:
        return connection.execute(delete(events).where(key.in_(chosen))).rowcount


def next_due_on(database: Database, connection: Connection) -> float | None:
    """Seconds until the earliest pending event may be tried (its next try, or the end
    of the hold a delivering node has on it), by the database clock; negative when it
    has come; None when nothing is pending. For the heartbeat's read."""
    statement = select(next_due_query().scalar_subquery(), database.now())
    return seconds_to(*connection.execute(statement).one())


def next_due_query() -> Select[Any]:
    free_at = case(
        (events.c.taken_until > events.c.next_try_at, events.c.taken_until),
        else_=events.c.next_try_at,
    )
    return select(func.min(free_at)).where(events.c.state == Delivery.PENDING.value)


def seconds_to(moment: datetime | None, now: datetime) -> float | None:
    if moment is None:
        return None
    return (_as_utc(moment) - _as_utc(now)).total_seconds()


def _as_utc(moment: datetime | str) -> datetime:
    if isinstance(moment, str):  # aggregates lose the column type on SQLite
        moment = datetime.fromisoformat(moment)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
