"""Alert events are born: what hooks hear about, written once per fleet.

An event is born in the transaction (or the statement) that writes the run row it is
about, so it is never lost and never doubled: its primary key (job, period, kind,
subject) makes a second insert a no-op. Their delivery is `store.deliveries`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, time
from typing import Any

from scheduler import calendars
from scheduler.instants import utc_text
from scheduler.model import Claim, Finish
from scheduler.states import Delivery, EventKind, Reason, RunStatus
from scheduler.store import streaks
from scheduler.store.database import Connection, Database
from scheduler.store.wakeups import Wake, notify_on

EVENTS = "scheduler_events"

FAILING = (RunStatus.FAILED.value, RunStatus.TIMED_OUT.value)
# Skips an operator asked for (a pause, a calendar's day) are not news to anyone, nor
# periods that wait their catch-up budget's pace (they run).
QUIET_REASONS = frozenset({Reason.PAUSED, Reason.CALENDAR, Reason.PACED})
DETAIL_LIMIT = 2000


@dataclass(frozen=True)
class Candidate:
    """An event a write of one run gives rise to, if the write lands."""

    run_id: str
    kind: EventKind
    subject: str = ""
    reason: str | None = None
    detail: str | None = None
    # `failed`: the streak it needs (`alert_after_failures`), and how many earlier
    # outcomes its streak is counted over; `streak` once known.
    need: int = 1
    cap: int = 0
    streak: int | None = None


def of_finish(outcome: Finish) -> list[Candidate]:
    """The events an attempt's outcome gives rise to (before knowing it was written)."""
    claim, status = outcome.claim, outcome.status
    detail = trim(f"{outcome.failure.type}: {outcome.failure.message}") if outcome.failure else None
    attempt = str(claim.attempt)
    found: list[Candidate] = []
    if status is RunStatus.SUCCEEDED:
        # Kept only after an unrecovered `failed` of the job (decided in the write).
        found.append(Candidate(claim.id, EventKind.RECOVERED, cap=streaks.RECOVERED_CAP))
    if status is RunStatus.TIMED_OUT:
        found.append(Candidate(claim.id, EventKind.TIMED_OUT, attempt, detail=detail))
    if status.value in FAILING:
        if outcome.retry_in is None:
            # Kept only when it makes `alert_after` in a row and no `failed` of the job
            # is unrecovered (decided in the write).
            need, cap = outcome.alert_after, streaks.cap_of(outcome)
            found.append(Candidate(claim.id, EventKind.FAILED, detail=detail, need=need, cap=cap))
        else:
            retry = f"retry in {round(outcome.retry_in, 1)} s"
            found.append(
                Candidate(claim.id, EventKind.RETRYING, attempt, detail=_join(detail, retry))
            )
    return found


def _join(*parts: str | None) -> str:
    return "; ".join(part for part in parts if part)


def trim(text: str) -> str:
    return text if len(text) <= DETAIL_LIMIT else text[: DETAIL_LIMIT - 1] + "…"


def _values(
    job: str, period: datetime, candidate: Candidate, attempt: int | None
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
        "streak": candidate.streak,
    }


def _insert_sql(database: Database) -> str:
    return f"""
        INSERT INTO {EVENTS} (job, period, kind, subject, run_id, attempt, reason, detail,
                              streak, created_at, state, tries, next_try_at)
        VALUES (:job, :period, :kind, :subject, :run_id, :attempt, :reason, :detail, :streak,
                {database.now}, '{Delivery.PENDING.value}', 0, {database.now})
        ON CONFLICT DO NOTHING
    """


def insert(
    database: Database,
    connection: Connection,
    rows: Iterable[tuple[str, datetime, int | None, Candidate]],
) -> None:
    """Insert events (job, period, attempt, candidate) inside the caller's transaction;
    one already there is left alone. The nodes are told at its commit (`Wake.ALERT`)."""
    born = 0
    statement = _insert_sql(database)
    for job, period, attempt, candidate in rows:
        born += connection.execute(statement, _values(job, period, candidate, attempt)).rowcount
    if born:
        notify_on(database, connection, Wake.ALERT)


def failed_before(connection: Connection, claim: Claim) -> bool:
    """Whether the job's newest `failed` or `recovered` event before this period is a
    `failed` one (SQLite's form of the test PostgreSQL's finish statement makes)."""
    kind = connection.execute(
        f"""
        SELECT kind FROM {EVENTS}
        WHERE job = :job AND period < :period AND kind IN ('failed', 'recovered')
        ORDER BY period DESC, kind LIMIT 1
        """,
        {"job": claim.job, "period": claim.period},
    ).scalar()
    return bool(kind == EventKind.FAILED.value)


def finished(database: Database, connection: Connection, outcome: Finish) -> int | None:
    """SQLite: the events of an outcome just written, in its transaction (what
    PostgreSQL's finish statement decides); a final failure's streak."""
    claim = outcome.claim
    rows, streak = [], None
    for candidate in of_finish(outcome):
        kept: Candidate | None = candidate
        if candidate.kind is EventKind.FAILED:
            streak = 1 + streaks.before(connection, claim.job, claim.period, candidate.cap)
            unrecovered = failed_before(connection, claim)
            kept = (
                None
                if streak < candidate.need or unrecovered
                else replace(
                    candidate, detail=streaks.failed_detail(streak, candidate.detail), streak=streak
                )
            )
        elif candidate.kind is EventKind.RECOVERED:
            kept = None
            if failed_before(connection, claim):
                ended = streaks.before(connection, claim.job, claim.period, candidate.cap)
                kept = replace(candidate, detail=streaks.recovered_detail(ended), streak=ended)
        if kept is not None:
            rows.append((claim.job, claim.period, claim.attempt, kept))
    insert(database, connection, rows)
    return streak


def finish_arrays(outcomes: Sequence[Finish]) -> dict[str, list[Any]]:
    """PostgreSQL: the candidate events of a batch of outcomes, as arrays for the finish
    statement, which keeps those of the rows it wrote: the final failures' apart (their
    streak is read), the others as they are."""
    candidates = [candidate for outcome in outcomes for candidate in of_finish(outcome)]
    failed = [c for c in candidates if c.kind is EventKind.FAILED]
    others = [c for c in candidates if c.kind is not EventKind.FAILED]
    return {
        "event_ids": [candidate.run_id for candidate in others],
        "event_kinds": [candidate.kind.value for candidate in others],
        "event_subjects": [candidate.subject for candidate in others],
        "event_details": [candidate.detail for candidate in others],
        "failed_ids": [candidate.run_id for candidate in failed],
        "failed_details": [candidate.detail for candidate in failed],
        "failed_needs": [candidate.need for candidate in failed],
        "failed_caps": [candidate.cap for candidate in failed],
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


_PASSED_OVER_KINDS = {
    RunStatus.MISSED.value: EventKind.MISSED,
    RunStatus.DEFERRED.value: EventKind.DEFERRED,
}


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
    merged: dict[tuple[str, str | None], PassedOver] = {}
    for part in groups:  # PostgreSQL answers a group per chunk of 10,000 periods
        seen = merged.get((part.status, part.reason))
        merged[part.status, part.reason] = (
            part
            if seen is None
            else PassedOver(
                part.status,
                part.reason,
                min(seen.first, part.first),
                max(seen.last, part.last),
                seen.count + part.count,
            )
        )
    rows = []
    for group in merged.values():
        if group.reason is not None and Reason(group.reason) in QUIET_REASONS:
            continue
        kind = _PASSED_OVER_KINDS.get(group.status, EventKind.SKIPPED)
        span = utc_text(group.first)
        if group.last != group.first:
            span += f" to {utc_text(group.last)}"
        detail = f"{group.count} period(s) {group.status} ({group.reason}): {span}"
        if kind is EventKind.DEFERRED:
            detail += (
                f"; run them: scheduler deferred run {job}"
                f", or skip them: scheduler deferred skip {job}"
            )
        rows.append(
            (job, group.first, None, Candidate("", kind, reason=group.reason, detail=detail))
        )
    insert(database, connection, rows)


def paused(database: Database, connection: Connection, outcome: Finish, streak: int) -> None:
    """The scheduler paused the outcome's job after `streak` failed periods in a row."""
    claim = outcome.claim
    event = Candidate(
        claim.id, EventKind.PAUSED, detail=streaks.pause_reason(streak), streak=streak
    )
    insert(database, connection, [(claim.job, claim.period, claim.attempt, event)])


def calendars_ending(database: Database, found: Sequence[tuple[str, calendars.Stored]]) -> None:
    """Calendars of dates (job, calendar) that end within 30 days: one event per job,
    calendar and last date, ever (a calendar given more dates warns again later)."""
    rows = []
    for job, calendar in found:
        assert calendar.last is not None
        detail = calendars.ending_text(calendar)
        event = Candidate("", EventKind.CALENDAR_ENDING, calendar.name, detail=detail)
        rows.append((job, datetime.combine(calendar.last, time(), UTC), None, event))
    if rows:
        with database.transaction() as connection:
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
