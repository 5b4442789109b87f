"""Repairing history by hand: backfill a range, trigger a manual run, re-run a period.

Every one of them claims through the same statements as the daemon (an insert that
loses on the primary key, or a compare-and-set takeover of an existing row), so a
repair never doubles a period that a node is running.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from itertools import islice
from typing import TYPE_CHECKING, Protocol

from scheduler.cron import Schedule
from scheduler.errors import UserError
from scheduler.instants import utc_text
from scheduler.model import FUTURE_TOLERANCE, Claim, Entry, Stale
from scheduler.registry import Job
from scheduler.states import ACTIVE_STATUSES, Origin, RunStatus
from scheduler.store import periods as period_rows
from scheduler.store import takeover
from scheduler.store.database import Database
from scheduler.store.requests import Fenced

if TYPE_CHECKING:  # foreground imports the daemon, which carries out requests with this module
    from scheduler.node.foreground import Foreground

BACKFILL_LIMIT = 10_000
NEVER_RAN = (RunStatus.SKIPPED, RunStatus.MISSED, RunStatus.DEFERRED)
FAILED = (RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.ABANDONED)


class Action(StrEnum):
    RUN = "run"  # no row yet: claim it
    RERUN = "rerun"  # a row that never succeeded: take it over as the next attempt
    KEEP = "keep"  # succeeded, running, or failed without --include-failed


class Named(Protocol):
    @property
    def id(self) -> str: ...


class Hands(Protocol):
    """Who claims a repair: a one-shot node (`Foreground`, for the CLI and
    `scheduler.admin`) or a daemon carrying out an operator's request."""

    @property
    def database(self) -> Database: ...

    @property
    def job(self) -> Job: ...

    @property
    def node(self) -> Named: ...

    def now(self) -> datetime: ...


@dataclass(frozen=True)
class Step:
    period: datetime
    status: RunStatus | None
    action: Action


def plan_backfill(
    periods: Sequence[datetime], rows: Sequence[Stale], *, include_failed: bool
) -> list[Step]:
    """What backfill does with each period of the range (pure: the rows are given)."""
    by_period = {row.period: row for row in rows}
    steps = []
    for period in periods:
        row = by_period.get(period)
        if row is None:
            steps.append(Step(period, None, Action.RUN))
        elif row.status in NEVER_RAN or (include_failed and row.status in FAILED):
            steps.append(Step(period, row.status, Action.RERUN))
        else:
            steps.append(Step(period, row.status, Action.KEEP))
    return steps


def backfill_steps(
    hands: Hands, start: datetime, end: datetime, *, include_failed: bool
) -> list[Step]:
    """Check the range and plan it; reads only."""
    job = hands.job
    return plan_range(
        hands.database,
        job.name,
        job.timed,
        start,
        end,
        now=hands.now(),
        include_failed=include_failed,
    )


def plan_range(
    database: Database,
    name: str,
    schedule: Schedule,
    start: datetime,
    end: datetime,
    *,
    now: datetime,
    include_failed: bool,
) -> list[Step]:
    """Check a backfill range of the job `name` and plan it; reads only. Needs the
    schedule, not the job's code, so the console previews a backfill without it."""
    if start > end:
        raise UserError(f"job {name!r}: --from: {utc_text(start)} is after --to")
    if end > now + FUTURE_TOLERANCE:
        raise UserError(f"job {name!r}: --to: {utc_text(end)} is in the future")
    periods = list(
        islice(schedule.periods_between(start - timedelta(seconds=1), end), BACKFILL_LIMIT + 1)
    )
    if len(periods) > BACKFILL_LIMIT:
        raise UserError(
            f"job {name!r}: --from/--to: the range holds more than {BACKFILL_LIMIT} periods; "
            "split it"
        )
    rows = period_rows.runs_between(database, name, start, end)
    return plan_backfill(periods, rows, include_failed=include_failed)


def run_backfill(foreground: Foreground, steps: Sequence[Step]) -> tuple[int, int]:
    """Claim and run the steps oldest first; (succeeded, not succeeded) counts."""
    succeeded = failed = 0
    for step in steps:
        if step.action is Action.KEEP or foreground.stopped:
            continue
        claim = claim_step(foreground, step)
        if claim is None:
            foreground.log.info("backfill_period_taken", period=step.period.isoformat())
            continue
        if foreground.run(claim):
            succeeded += 1
        else:
            failed += 1
    return succeeded, failed


def claim_step(hands: Hands, step: Step, fenced: Fenced | None = None) -> Claim | None:
    """Claim one planned period of a backfill; None if it changed since it was planned.
    `fenced`: for a console request (see `store.requests.Fenced`)."""
    job = hands.job
    if step.action is Action.RUN:
        written = period_rows.write(
            hands.database,
            job.name,
            [Entry(step.period, RunStatus.CLAIMED)],
            holder=hands.node.id,
            lease_seconds=job.policy.lease.total_seconds(),
            origin=Origin.BACKFILL,
            fenced=fenced,
        )
        return written.won[0] if written.won else None
    (row,) = period_rows.runs_between(hands.database, job.name, step.period, step.period)
    if row.status is not step.status:
        return None
    return takeover.retake(
        hands.database, row, hands.node.id, Origin.BACKFILL, by_hand=True, fenced=fenced
    )


def trigger(hands: Hands, fenced: Fenced | None = None) -> Claim:
    """Claim a manual run now. Its period carries sub-second precision, so it can never
    be a period of the schedule, which has whole seconds."""
    now = hands.now()
    period = now if now.microsecond else now.replace(microsecond=1)
    (claim,) = period_rows.write(
        hands.database,
        hands.job.name,
        [Entry(period, RunStatus.CLAIMED)],
        holder=hands.node.id,
        lease_seconds=hands.job.policy.lease.total_seconds(),
        origin=Origin.MANUAL,
        fenced=fenced,
    ).won
    return claim


def rerun_target(hands: Hands, period: datetime, *, force: bool) -> Stale:
    """The run to take over, or a one-line refusal naming the job and the period."""
    return rerun_row(hands.database, hands.job.name, period, force=force)


def rerun_row(database: Database, name: str, period: datetime, *, force: bool) -> Stale:
    """The run of job `name` at `period` to take over, or a one-line refusal; reads only."""
    rows = period_rows.runs_between(database, name, period, period)
    if not rows:
        raise UserError(
            f"job {name!r}: PERIOD: {utc_text(period)} has no run; use `scheduler backfill`"
        )
    (row,) = rows
    if row.status in ACTIVE_STATUSES:
        raise UserError(
            f"job {name!r}: PERIOD: {utc_text(period)} is {row.status.value} on {row.holder}"
        )
    if row.status is RunStatus.SUCCEEDED and not force:
        raise UserError(
            f"job {name!r}: PERIOD: {utc_text(period)} succeeded; add --force to run it again"
        )
    return row


def rerun(hands: Hands, row: Stale, fenced: Fenced | None = None) -> Claim | None:
    return takeover.retake(
        hands.database, row, hands.node.id, Origin.MANUAL, by_hand=True, fenced=fenced
    )
