"""Alert events: what hooks hear about, written once per fleet, delivered by one node.

An event is born in the transaction (or the statement) that writes the run row it is
about, so it is never lost and never doubled: its primary key (job, period, kind,
subject) makes a second insert a no-op. Delivery is taken like a console request, by a
compare-and-set of `taken_by` (with `taken_until`, so that a node that died while
delivering hands the event on), and settled fenced on (node, tries).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, delete, exists, func, or_, select, tuple_, update

from scheduler.instants import utc_text
from scheduler.model import Claim, Event, Finish
from scheduler.states import Delivery, EventKind, Reason, RunStatus
from scheduler.store.database import Database
from scheduler.store.schema import events, items

FAILING = (RunStatus.FAILED.value, RunStatus.TIMED_OUT.value)
# Skips an operator asked for (a pause) are not news to anyone.
QUIET_REASONS = frozenset({Reason.PAUSED})
DETAIL_LIMIT = 2000


@dataclass(frozen=True)
class Candidate:
    """An event a write of one run gives rise to, if the write lands."""

    run_id: str
    kind: EventKind
    subject: str = ""
    reason: str | None = None
    detail: str | None = None


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


def of_finish(outcome: Finish) -> list[Candidate]:
    """The events an attempt's outcome gives rise to (before knowing it was written)."""
    claim, status = outcome.claim, outcome.status
    detail = (
        _trim(f"{outcome.failure.type}: {outcome.failure.message}") if outcome.failure else None
    )
    attempt = str(claim.attempt)
    found: list[Candidate] = []
    if status is RunStatus.SUCCEEDED:
        # Kept only after an unrecovered `failed` of the job (decided in the write).
        found.append(Candidate(claim.id, EventKind.RECOVERED))
    if status is RunStatus.TIMED_OUT:
        found.append(Candidate(claim.id, EventKind.TIMED_OUT, attempt, detail=detail))
    if status.value in FAILING:
        if outcome.retry_in is None:
            found.append(Candidate(claim.id, EventKind.FAILED, detail=detail))
        else:
            retry = f"retry in {round(outcome.retry_in, 1)} s"
            found.append(
                Candidate(claim.id, EventKind.RETRYING, attempt, detail=_join(detail, retry))
            )
    return found


def _join(*parts: str | None) -> str:
    return "; ".join(part for part in parts if part)


def _trim(text: str) -> str:
    return text if len(text) <= DETAIL_LIMIT else text[: DETAIL_LIMIT - 1] + "…"


def _values(
    database: Database, job: str, period: datetime, candidate: Candidate, attempt: int | None
) -> dict[str, Any]:
    return {
        "job": job,
        "period": period,
        "kind": candidate.kind.value,
        "subject": candidate.subject,
        "run_id": candidate.run_id or None,
        "attempt": attempt,
        "reason": candidate.reason,
        "detail": candidate.detail,
        "created_at": database.now(),
        "state": Delivery.PENDING.value,
        "tries": 0,
        "next_try_at": database.now(),
    }


def insert(
    database: Database,
    connection: Connection,
    rows: Iterable[tuple[str, datetime, int | None, Candidate]],
) -> None:
    """Insert events (job, period, attempt, candidate) inside the caller's transaction;
    one already there is left alone."""
    for job, period, attempt, candidate in rows:
        statement = (
            database.insert(events)
            .values(**_values(database, job, period, candidate, attempt))
            .on_conflict_do_nothing()
        )
        connection.execute(statement)


def failed_before(connection: Connection, claim: Claim) -> bool:
    """Whether the job's newest `failed` or `recovered` event before this period is a
    `failed` one (SQLite's form of the test PostgreSQL's finish statement makes)."""
    statement = (
        select(events.c.kind)
        .where(
            events.c.job == claim.job,
            events.c.period < claim.period,
            events.c.kind.in_([EventKind.FAILED.value, EventKind.RECOVERED.value]),
        )
        .order_by(events.c.period.desc(), events.c.kind)
        .limit(1)
    )
    return connection.execute(statement).scalar() == EventKind.FAILED.value


def finished(database: Database, connection: Connection, outcome: Finish) -> None:
    """SQLite: the events of an outcome just written, in its transaction."""
    claim = outcome.claim
    rows = [
        (claim.job, claim.period, claim.attempt, candidate)
        for candidate in of_finish(outcome)
        if candidate.kind is not EventKind.RECOVERED or failed_before(connection, claim)
    ]
    insert(database, connection, rows)


def finish_arrays(outcomes: Sequence[Finish]) -> dict[str, list[Any]]:
    """PostgreSQL: the candidate events of a batch of outcomes, as arrays for the finish
    statement, which keeps those of the rows it wrote."""
    candidates = [candidate for outcome in outcomes for candidate in of_finish(outcome)]
    return {
        "event_ids": [candidate.run_id for candidate in candidates],
        "event_kinds": [candidate.kind.value for candidate in candidates],
        "event_subjects": [candidate.subject for candidate in candidates],
        "event_details": [candidate.detail for candidate in candidates],
    }


def skipped(
    database: Database, connection: Connection, claims: Sequence[Claim], reasons: dict[str, Reason]
) -> None:
    """Periods a claim inserted as skipped, in the claim's transaction (not pauses)."""
    rows = [
        (
            claim.job,
            claim.period,
            None,
            Candidate(
                claim.id,
                EventKind.SKIPPED,
                reason=reasons[claim.id].value,
                detail=f"skipped: {reasons[claim.id].value}",
            ),
        )
        for claim in claims
        if reasons.get(claim.id) is not None and reasons[claim.id] not in QUIET_REASONS
    ]
    insert(database, connection, rows)


@dataclass(frozen=True)
class PassedOver:
    """Periods one catch-up write recorded with one status and reason."""

    status: str
    reason: str | None
    first: datetime
    last: datetime
    count: int


def grouped(inserted: Iterable[tuple[datetime, str, str | None]]) -> list[PassedOver]:
    """Rows written (period, status, reason), grouped by status and reason."""
    groups: dict[tuple[str, str | None], list[datetime]] = {}
    for period, status, reason in inserted:
        groups.setdefault((status, reason), []).append(period)
    return [
        PassedOver(status, reason, min(periods), max(periods), len(periods))
        for (status, reason), periods in groups.items()
    ]


def passed_over(
    database: Database, connection: Connection, job: str, groups: Sequence[PassedOver]
) -> None:
    """Periods catch-up wrote as missed or skipped, in its transaction: one event per status
    and reason for the whole write (a day of missed seconds is one alert, not 86,400),
    named by its first period. Pauses are left out."""
    rows = []
    for group in groups:
        if group.reason is not None and Reason(group.reason) in QUIET_REASONS:
            continue
        kind = EventKind.MISSED if group.status == RunStatus.MISSED.value else EventKind.SKIPPED
        span = utc_text(group.first)
        if group.last != group.first:
            span += f" to {utc_text(group.last)}"
        detail = f"{group.count} period(s) {group.status} ({group.reason}): {span}"
        rows.append(
            (job, group.first, None, Candidate("", kind, reason=group.reason, detail=detail))
        )
    insert(database, connection, rows)


def stuck(database: Database, found: Sequence[tuple[str, datetime, str, str, int]]) -> None:
    """Stuck items (job, period, key, run id, attempt): one event per item, ever."""
    rows = [
        (
            job,
            period,
            attempt,
            Candidate(
                run_id,
                EventKind.STUCK_ITEM,
                key[:500],
                detail=f"item {key!r} claimed and never finished",
            ),
        )
        for job, period, key, run_id, attempt in found
    ]
    with database.transaction() as connection:
        insert(database, connection, rows)


# -- delivery ------------------------------------------------------------------------

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
        "last_error": _trim(error) if error else None,
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
