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

from scheduler.errors import UserError
from scheduler.instants import utc_text
from scheduler.oneshot import FUTURE_TOLERANCE, Foreground
from scheduler.states import ACTIVE_STATUSES, Origin, RunStatus
from scheduler.store import history, runs
from scheduler.store.history import Entry
from scheduler.store.runs import Claim, Stale

BACKFILL_LIMIT = 10_000
NEVER_RAN = (RunStatus.SKIPPED, RunStatus.MISSED)
FAILED = (RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.ABANDONED)


class Action(StrEnum):
    RUN = "run"  # no row yet: claim it
    RERUN = "rerun"  # a row that never succeeded: take it over as the next attempt
    KEEP = "keep"  # succeeded, running, or failed without --include-failed


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
    foreground: Foreground, start: datetime, end: datetime, *, include_failed: bool
) -> list[Step]:
    """Check the range and plan it; reads only."""
    job = foreground.job
    if start > end:
        raise UserError(f"job {job.name!r}: --from: {utc_text(start)} is after --to")
    now = foreground.now()
    if end > now + FUTURE_TOLERANCE:
        raise UserError(f"job {job.name!r}: --to: {utc_text(end)} is in the future")
    periods = list(
        islice(job.schedule.periods_between(start - timedelta(seconds=1), end), BACKFILL_LIMIT + 1)
    )
    if len(periods) > BACKFILL_LIMIT:
        raise UserError(
            f"job {job.name!r}: --from/--to: the range holds more than {BACKFILL_LIMIT} periods; "
            "split it"
        )
    rows = history.runs_between(foreground.database, job.name, start, end)
    return plan_backfill(periods, rows, include_failed=include_failed)


def run_backfill(foreground: Foreground, steps: Sequence[Step]) -> tuple[int, int]:
    """Claim and run the steps oldest first; (succeeded, not succeeded) counts."""
    succeeded = failed = 0
    for step in steps:
        if step.action is Action.KEEP or foreground.stopped:
            continue
        claim = _claim_step(foreground, step)
        if claim is None:
            foreground.log.info("backfill_period_taken", period=step.period.isoformat())
            continue
        if foreground.run(claim):
            succeeded += 1
        else:
            failed += 1
    return succeeded, failed


def _claim_step(foreground: Foreground, step: Step) -> Claim | None:
    job = foreground.job
    if step.action is Action.RUN:
        written = history.write(
            foreground.database,
            job.name,
            [Entry(step.period, RunStatus.CLAIMED)],
            holder=foreground.node.id,
            lease_seconds=job.policy.lease.total_seconds(),
            origin=Origin.BACKFILL,
        )
        return written.won[0] if written.won else None
    (row,) = history.runs_between(foreground.database, job.name, step.period, step.period)
    if row.status is not step.status:
        return None
    return runs.retake(foreground.database, row, foreground.node.id, Origin.BACKFILL, by_hand=True)


def trigger(foreground: Foreground) -> Claim:
    """Claim a manual run now. Its period carries sub-second precision, so it can never
    be a period of the schedule, which has whole seconds."""
    now = foreground.now()
    period = now if now.microsecond else now.replace(microsecond=1)
    (claim,) = history.write(
        foreground.database,
        foreground.job.name,
        [Entry(period, RunStatus.CLAIMED)],
        holder=foreground.node.id,
        lease_seconds=foreground.job.policy.lease.total_seconds(),
        origin=Origin.MANUAL,
    ).won
    return claim


def rerun_target(foreground: Foreground, period: datetime, *, force: bool) -> Stale:
    """The run to take over, or a one-line refusal naming the job and the period."""
    job = foreground.job
    rows = history.runs_between(foreground.database, job.name, period, period)
    if not rows:
        raise UserError(
            f"job {job.name!r}: PERIOD: {utc_text(period)} has no run; use `scheduler backfill`"
        )
    (row,) = rows
    if row.status in ACTIVE_STATUSES:
        raise UserError(
            f"job {job.name!r}: PERIOD: {utc_text(period)} is {row.status.value} on {row.holder}"
        )
    if row.status is RunStatus.SUCCEEDED and not force:
        raise UserError(
            f"job {job.name!r}: PERIOD: {utc_text(period)} succeeded; add --force to run it again"
        )
    return row


def rerun(foreground: Foreground, row: Stale) -> Claim | None:
    return runs.retake(foreground.database, row, foreground.node.id, Origin.MANUAL, by_hand=True)
