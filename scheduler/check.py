"""The dead-man's switch: which jobs did not run when they should have.

`scheduler check` reads only the database, so it answers even when every node is
down. The decisions are pure functions of (jobs, runs, now); `gather` fetches their
inputs.

- **overdue**: a job's latest expected period has no succeeded run (nor any later
  succeeded period) once its grace (`alert_after`) has passed. A period is expected
  when it is at or after the day the job was first seen and the job is not paused;
  a period skipped because the job was paused is accounted for.
- **failed / timed_out / missed / abandoned**: a run recorded in one of these statuses
  within the window, except one still waiting for a retry (an abandoned run always
  gets one unless it was given up: its node died too often, or it was taken too late).
- **stuck**: items claimed by an attempt that ended without finishing them (one
  finding per job): someone must check their effect by hand.
- **lingering**: a run that timed out and whose function still runs in its thread (a
  `timed_out` row whose lease is still held), however long ago: the job's later periods
  are skipped until it returns. Listed instead of its `timed_out` finding.

- **late schedules**: schedules created at run time, of a job checked here, due for
  longer than `SCHEDULE_LATE` and fired by no node (no node runs their job, or none is
  up): one finding per job, with how many and since when. A schedule's recorded
  failures are findings like any job's, under its run's name `@<key>`.

Retired jobs (no node runs them any more, see `scheduler.retirement`) are not checked.
A template (`@job(cron=None)`) has no period of its own to be overdue.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from enum import StrEnum

from scheduler import calendars, retirement
from scheduler.cron import Schedule, parse_schedule
from scheduler.durations import format_duration
from scheduler.errors import UserError
from scheduler.model import SILENT_BEATS, JobRow
from scheduler.policy import Policy
from scheduler.states import Reason, RunStatus, status_text
from scheduler.store import deferred as deferred_rows
from scheduler.store import items as stored_items
from scheduler.store import queries
from scheduler.store import schedules as stored_schedules
from scheduler.store.database import Database
from scheduler.store.deferred import DeferredPeriods
from scheduler.store.items import ItemRow
from scheduler.store.jobs import all_jobs
from scheduler.store.queries import NodeRow, RunRow, Success
from scheduler.store.schedules import LATE_COUNTED, LateSchedules

DEFAULT_WINDOW = timedelta(days=1)
# A node that missed SILENT_BEATS default heartbeats is not alive (the table holds no
# node's own interval).
NODE_SILENT_AFTER = SILENT_BEATS * Policy().heartbeat
# Stuck items read per check; more are counted as "at least" this many.
STUCK_LIMIT = 1000
# Keys of stuck items named in a finding; `scheduler items JOB --stuck` lists them all.
STUCK_KEYS_SHOWN = 3
# A schedule created at run time not fired this long after it fell due is late: a node
# fires a due schedule within a second, or goes through catch-up after an outage.
SCHEDULE_LATE = timedelta(minutes=2)
# Rows written before job policies were stored: one default lease TTL.
FALLBACK_ALERT_AFTER = timedelta(seconds=30)


class Problem(StrEnum):
    OVERDUE = "overdue"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    MISSED = "missed"
    ABANDONED = "abandoned"
    STUCK = "stuck"
    LINGERING = "lingering"
    LATE_SCHEDULES = "late_schedules"
    # The scheduler paused it (or some of its schedules) after a failure streak.
    PAUSED_BY_FAILURES = "paused_by_failures"
    # A calendar of dates it skips ends within 30 days: then it runs every day.
    CALENDAR_ENDING = "calendar_ending"
    # Catch-up deferred periods past its budget: they wait for an operator's answer.
    DEFERRED = "deferred"


# A period skipped on purpose (a pause, a day its calendar excludes) is not overdue.
QUIET_SKIPS = (Reason.PAUSED, Reason.CALENDAR)
RECORDED_PROBLEMS = (RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.MISSED, RunStatus.ABANDONED)


@dataclass(frozen=True)
class WatchedJob:
    """What `check` needs to know of a job, as the nodes registered it."""

    name: str
    # None: a template, whose periods are its schedules'.
    schedule: Schedule | None
    first_seen: datetime
    paused: bool
    alert_after: timedelta
    retries: int
    # Why the scheduler paused it; None when it is not paused, or an operator did.
    pause_reason: str | None = None
    paused_at: datetime | None = None
    calendars: tuple[calendars.Stored, ...] = ()

    @classmethod
    def from_row(cls, row: JobRow) -> WatchedJob:
        if row.alert_after_seconds is not None:
            alert_after = timedelta(seconds=row.alert_after_seconds)
        else:
            alert_after = FALLBACK_ALERT_AFTER + timedelta(seconds=row.timeout_seconds or 0)
        return cls(
            name=row.name,
            schedule=parse_schedule(row.cron, row.timezone) if row.cron else None,
            first_seen=row.first_seen,
            paused=row.paused,
            alert_after=alert_after,
            retries=row.retries or 0,
            pause_reason=row.pause_reason if row.paused else None,
            paused_at=row.paused_at,
            calendars=tuple(calendars.stored(row.calendars)),
        )


@dataclass(frozen=True)
class Finding:
    problem: Problem
    job: str
    period: datetime
    status: str | None
    reason: str | None
    detail: str


@dataclass(frozen=True)
class Report:
    checked_at: datetime
    window: timedelta
    jobs: int
    paused: int
    nodes_alive: int
    findings: tuple[Finding, ...]
    # Registered jobs left out because no node runs them any more (scheduler.retirement).
    retired: int = 0
    # The jobs checked: registered, not retired.
    watched: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def overdue_jobs(self) -> int:
        return len({f.job for f in self.findings if f.problem is Problem.OVERDUE})


def expected_period(job: WatchedJob, now: datetime) -> datetime | None:
    """The newest period whose grace has passed, if the job owes a run for it."""
    if job.paused or job.schedule is None:
        return None
    period = job.schedule.latest_at_or_before(now - job.alert_after)
    if period is None or period < job.first_seen:
        return None
    return period


def overdue(
    job: WatchedJob, period: datetime, run: RunRow | None, success: Success | None
) -> Finding | None:
    """An overdue finding for `period`, unless it (or a later period) succeeded."""
    if success is not None and success.period >= period:
        return None
    if run is not None and run.status == RunStatus.SKIPPED and run.reason in QUIET_SKIPS:
        return None
    if run is None:
        state = "no run was recorded"
    else:
        state = f"its run is {_status_text(run)}"
        if run.error_type:
            state += f" ({_error_text(run)})"
    grace = format_duration(job.alert_after)
    return Finding(
        problem=Problem.OVERDUE,
        job=job.name,
        period=period,
        status=run.status if run else None,
        reason=run.reason if run else None,
        detail=f"no success {grace} after this period: {state}",
    )


def recorded_problem(run: RunRow, retries: int) -> Finding | None:
    """A failed, timed-out or missed run, unless a retry of it is still to come."""
    if run.status not in RECORDED_PROBLEMS:
        return None
    if run.status == RunStatus.FAILED and run.retry_at is not None and run.attempt <= retries:
        return None
    if run.status == RunStatus.ABANDONED and run.retry_at is not None:
        return None
    detail = _error_text(run) if run.error_type else _status_text(run)
    return Finding(Problem(run.status), run.job, run.period, run.status, run.reason, detail)


def is_lingering(run: RunRow, now: datetime) -> bool:
    """Timed out with its function still running in its thread: its lease is still held."""
    return (
        run.status == RunStatus.TIMED_OUT
        and run.lease_expires_at is not None
        and run.lease_expires_at > now
    )


def lingering(run: RunRow, now: datetime) -> Finding:
    """A timed-out run whose function still runs in its thread: how long it has run."""
    timed_out_after = _seconds_text((run.duration_ms or 0) / 1000)
    running = _seconds_text((now - (run.started_at or run.claimed_at)).total_seconds())
    return Finding(
        Problem.LINGERING,
        run.job,
        run.period,
        run.status,
        run.reason,
        f"timed out after {timed_out_after} and still running on {run.holder} "
        f"({running} since it started): later periods are skipped until it returns",
    )


def assess(
    jobs: Sequence[WatchedJob],
    expected: Mapping[str, datetime],
    runs_at_expected: Mapping[str, RunRow],
    successes: Mapping[str, Success],
    recorded: Iterable[RunRow],
    *,
    lingering_now: Iterable[Finding] = (),
    templates: Mapping[str, str] | None = None,
) -> list[Finding]:
    """Every finding: overdue ones first, then runs still running past their timeout
    (`lingering_now`), then what was recorded; a period already listed is not listed
    again for what was recorded of it. `templates`: the job of each schedule's run name
    among the recorded and lingering runs."""
    templates = templates or {}
    findings: list[Finding] = []
    for job in jobs:
        if job.name in expected:
            period = expected[job.name]
            found = overdue(job, period, runs_at_expected.get(job.name), successes.get(job.name))
            if found:
                findings.append(found)
    retries = {job.name: job.retries for job in jobs}
    # A schedule's runs (`@<key>`) are its job's: their retries are the job's.
    retries |= {name: retries[job] for name, job in templates.items() if job in retries}
    findings += [finding for finding in lingering_now if finding.job in retries]
    listed = {(f.job, f.period) for f in findings}
    for run in recorded:
        if run.job not in retries or (run.job, run.period) in listed:
            continue
        found = recorded_problem(run, retries[run.job])
        if found:
            findings.append(found)
    return findings


def stuck(rows: Sequence[ItemRow], watched: Collection[str]) -> list[Finding]:
    """One finding per watched job with stuck items, named by its newest one's period."""
    by_job: dict[str, list[ItemRow]] = {}
    for row in rows:
        if row.job in watched:
            by_job.setdefault(row.job, []).append(row)
    findings = []
    for job, found in sorted(by_job.items()):
        keys = ", ".join(repr(row.key) for row in found[:STUCK_KEYS_SHOWN])
        more = " …" if len(found) > STUCK_KEYS_SHOWN else ""
        count = f"{len(found)}+" if len(rows) >= STUCK_LIMIT else str(len(found))
        detail = (
            f"{count} item(s) claimed by an attempt that ended without finishing them: "
            f"{keys}{more}; check each, then `scheduler items done|release {job} KEY`"
        )
        findings.append(Finding(Problem.STUCK, job, found[0].period, found[0].state, None, detail))
    return findings


def late_schedules(late: Mapping[str, LateSchedules], watched: Collection[str]) -> list[Finding]:
    """One finding per watched job whose schedules are due and fired by no node."""
    findings = []
    for job, found in sorted(late.items()):
        if job not in watched:
            continue
        count = f"{found.count}+" if found.count >= LATE_COUNTED else str(found.count)
        detail = (
            f"{count} schedule(s) created at run time due since {found.first.isoformat()} "
            "and fired by no node: is a node that runs this job up?"
        )
        findings.append(Finding(Problem.LATE_SCHEDULES, job, found.first, None, None, detail))
    return findings


def failure_paused(
    jobs: Sequence[WatchedJob], schedules: Mapping[str, LateSchedules]
) -> list[Finding]:
    """A finding per job the scheduler paused after a failure streak, and per template
    some of whose schedules it paused: an operator's pause is deliberate, this is not."""
    findings = []
    for job in jobs:
        if job.pause_reason is not None and job.paused_at is not None:
            detail = f"{job.pause_reason}; fix it, then `scheduler resume {job.name}`"
            findings.append(
                Finding(Problem.PAUSED_BY_FAILURES, job.name, job.paused_at, None, None, detail)
            )
        if (found := schedules.get(job.name)) is not None:
            detail = (
                f"{found.count} schedule(s) created at run time paused by the scheduler after "
                "failing periods in a row; `scheduler schedules list --job "
                f"{job.name} --paused` lists them, `scheduler schedules resume KEY` resumes one"
            )
            findings.append(
                Finding(Problem.PAUSED_BY_FAILURES, job.name, found.first, None, None, detail)
            )
    return findings


def deferred(found: Sequence[DeferredPeriods], watched: Collection[str]) -> list[Finding]:
    """A finding per job (or schedule created at run time) with periods its catch-up
    budget deferred: nothing runs them until an operator answers (those approved and not
    yet claimed are counted too; those waiting their pace are not: they run by
    themselves)."""
    findings = []
    for row in found:
        if row.job not in watched and stored_schedules.schedule_key(row.job) is None:
            continue
        if not row.waiting and not row.approved:
            continue
        detail = f"{row.waiting + row.approved} period(s) deferred by the catch-up budget"
        if row.approved:
            detail += f" ({row.approved} approved, waiting for a node)"
        detail += (
            f"; `scheduler deferred run {row.job}` runs them, "
            f"`scheduler deferred skip {row.job}` skips them"
        )
        findings.append(Finding(Problem.DEFERRED, row.job, row.first, None, None, detail))
    return findings


def calendars_ending(jobs: Sequence[WatchedJob], now: datetime) -> list[Finding]:
    """A finding per calendar of dates whose last date comes within 30 days."""
    findings = []
    for job in jobs:
        for calendar in calendars.ending(job.calendars, now.date()):
            assert calendar.last is not None
            findings.append(
                Finding(
                    Problem.CALENDAR_ENDING,
                    job.name,
                    datetime.combine(calendar.last, time(), UTC),
                    None,
                    None,
                    calendars.ending_text(calendar),
                )
            )
    return findings


def alive(node: NodeRow, now: datetime) -> bool:
    return node.stopped_at is None and now - node.heartbeat_at < NODE_SILENT_AFTER


def gather(
    database: Database,
    *,
    names: Collection[str] = (),
    window: timedelta = DEFAULT_WINDOW,
) -> Report:
    """Read what `check` needs from the database and assess it at the database's now."""
    now = queries.clock(database)
    rows = all_jobs(database)
    unknown = sorted(set(names) - {row.name for row in rows})
    if unknown:
        raise UserError(f"--job: no job named {unknown[0]!r} has been registered")
    chosen = [row for row in rows if not names or row.name in names]
    retired = retirement.retired_among(database, chosen, lambda node: alive(node, now), now)
    jobs = [WatchedJob.from_row(row) for row in chosen if row.name not in retired]
    expected = {
        job.name: period for job in jobs if (period := expected_period(job, now)) is not None
    }
    recorded = queries.recorded_since(database, RECORDED_PROBLEMS, now - window)
    lingering_runs = queries.lingering(database)
    findings = assess(
        jobs,
        expected,
        queries.runs_at(database, expected),
        queries.last_successes(database),
        recorded,
        lingering_now=[lingering(run, now) for run in lingering_runs],
        templates=stored_schedules.jobs_of(
            database, {run.job for run in [*recorded, *lingering_runs] if run.job[:1] == "@"}
        ),
    )
    stuck_items = stored_items.list_items(database, None, stuck_only=True, limit=STUCK_LIMIT)
    findings += stuck(stuck_items, {job.name for job in jobs})
    templates = [job.name for job in jobs if job.schedule is None]
    findings += late_schedules(
        stored_schedules.late(database, templates, SCHEDULE_LATE, LATE_COUNTED), templates
    )
    findings += failure_paused(jobs, stored_schedules.failure_paused(database, templates))
    findings += calendars_ending(jobs, now)
    findings += deferred(deferred_rows.deferred_periods(database), {job.name for job in jobs})
    return Report(
        checked_at=now,
        window=window,
        jobs=len(jobs),
        paused=sum(job.paused for job in jobs),
        retired=len(retired),
        watched=tuple(job.name for job in jobs),
        nodes_alive=sum(
            alive(node, now)
            for node in queries.list_nodes(database, seen_since=now - NODE_SILENT_AFTER)
        ),
        findings=tuple(findings),
    )


def _status_text(run: RunRow) -> str:
    return status_text(run.status, run.reason)


def _seconds_text(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _error_text(run: RunRow) -> str:
    short_type = (run.error_type or "").rsplit(".", 1)[-1]
    message = (run.error_message or "").strip().splitlines()
    return f"{short_type}: {message[0]}" if message else short_type
