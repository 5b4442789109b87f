"""What the operator commands do to a running fleet, as Python: for an application's admin
page, a script or a test, without a subprocess.

```python
from scheduler.admin import Admin

with Admin("postgresql://app@db/app") as admin:
    admin.pause("billing")
    failed = admin.runs(job="billing", status="failed", since="1d")
    report = admin.check()
```

The CLI's `pause`, `resume`, `trigger`, `rerun`, `backfill`, `runs`, `runs show`,
`check` and `items release|done` call these same methods, and so does the web console
(which asks a running node to trigger, rerun or backfill: `request_trigger`, …), so a
mistake raises the `UserError` whose one-line message the CLI prints. Inputs may be
given as the CLI takes them (`"2026-11-30T03:00:00Z"`, `"1d"`) or as `datetime` and `timedelta`.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING

from scheduler import check as checking
from scheduler import job_names
from scheduler.config import DEFAULT_GRACE, node_identity, parse_instant, parse_option_duration
from scheduler.cron import parse_schedule
from scheduler.errors import UserError
from scheduler.model import JobRow
from scheduler.node import repair
from scheduler.node.repair import Step
from scheduler.registry import Job
from scheduler.schedules import Schedules
from scheduler.states import RunStatus
from scheduler.store import concurrency, queries
from scheduler.store import deferred as deferred_rows
from scheduler.store import items as stored_items
from scheduler.store import jobs as job_rows
from scheduler.store import migrate as migrations
from scheduler.store import requests as asked
from scheduler.store import schedules as schedules_stored
from scheduler.store.concurrency import PoolState
from scheduler.store.database import Database, open_database
from scheduler.store.deferred import DeferredPeriods
from scheduler.store.items import ItemRow, ItemState
from scheduler.store.queries import AttemptRow, RunRow
from scheduler.store.requests import Draft, RequestKind, RequestRow
from scheduler.views import iso

if TYPE_CHECKING:
    from scheduler.node.foreground import Foreground

Instant = datetime | str
Span = timedelta | str
# A period copied to the second finds the one run within that second (a manual run's
# period has microseconds that a table to the second leaves out).
SECOND = timedelta(seconds=1)


@dataclass(frozen=True)
class RunDetail:
    """One run and the attempts recorded for it (the current one may be missing)."""

    run: RunRow
    attempts: list[AttemptRow]


@dataclass(frozen=True)
class Outcome:
    """How a run that `trigger` or `rerun` ran here ended."""

    run_id: str
    job: str
    period: datetime
    status: str
    succeeded: bool


@dataclass(frozen=True)
class Backfill:
    """What `backfill` planned for each period of the range, and how its runs ended."""

    steps: list[Step]
    succeeded: int = 0
    failed: int = 0
    interrupted: bool = False


class Admin:
    """The scheduler's database as an operator sees it; give a URL or an open `Database`.

    A URL is opened here and closed by `close()` (or the `with` block); a `Database`
    stays the caller's. Either way the schema must be the one this version needs.
    """

    def __init__(self, database: Database | str) -> None:
        self._owned = isinstance(database, str)
        self.database = (
            open_database(database, connections=2) if isinstance(database, str) else database
        )
        try:
            migrations.require_current_schema(self.database)
        except UserError:
            self.close()
            raise

    def close(self) -> None:
        """Close the database this `Admin` opened from a URL; one it was given stays open."""
        if self._owned:
            self.database.dispose()

    def __enter__(self) -> Admin:
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- what happened ------------------------------------------------------------

    def runs(
        self,
        *,
        job: str | Iterable[str] = (),
        status: str | Iterable[str] = (),
        since: Instant | Span | None = None,
        limit: int = 50,
    ) -> list[RunRow]:
        """Runs, newest period first; `since` is an instant or a span back from now."""
        statuses = _names(status)
        unknown = sorted(set(statuses) - set(RunStatus))
        if unknown:
            known = ", ".join(RunStatus)
            raise UserError(f"--status: {unknown[0]!r} is not a run status (known: {known})")
        if limit < 1:
            raise UserError(f"--limit: {limit} is not a positive number")
        return queries.list_runs(
            self.database,
            jobs=[self.recorded_job(name) for name in _names(job)],
            statuses=statuses,
            since=self._since(since),
            limit=limit,
        )

    def run(self, run: str, period: Instant | None = None) -> RunDetail:
        """One run: by its id (`run_id` in every log line), or by job and period."""
        found = self._find(run, period)
        return RunDetail(found, queries.attempts_of(self.database, found.id))

    def check(self, *, job: str | Iterable[str] = (), window: Span = "1d") -> checking.Report:
        """What `scheduler check` reports; `report.ok` is its exit status."""
        span = _span("--window", window)
        names = [self.job_name(name) for name in _names(job)]
        return checking.gather(self.database, names=names, window=span)

    def stuck_items(self, job: str | None = None, *, limit: int = 100) -> list[ItemRow]:
        """Items claimed by an attempt that ended without finishing them, of every job or
        of one, most recently claimed first."""
        named = None if job is None else self.recorded_job(job)
        return stored_items.list_items(self.database, named, stuck_only=True, limit=limit)

    # -- changing the fleet -----------------------------------------------------------

    def job_name(self, name: str) -> str:
        """The registered job that `name` stands for: itself, or the one registered name
        ending in `.name` (`send_reminders` for `myapp.jobs.send_reminders`); an unknown
        name comes back as given, for the call that uses it to refuse."""
        if name[:1] == "@" or job_rows.all_jobs(self.database, {name}):
            return name
        registered = [row.name for row in job_rows.all_jobs(self.database)]
        return job_names.resolve(name, registered) or name

    def recorded_job(self, name: str) -> str:
        """The job whose history `name` stands for, for the calls that read it (`runs`,
        `run(JOB, PERIOD)`, `stuck_items`, the items' and the CLI's `events` and `items`):
        a registered job's full name; a schedule's `@key`; the full name of a job with
        runs that no node registered (one run from a shell by `trigger`); else, as
        `job_name` resolves it, the one registered name ending in `.name`. A name that is
        none of these, or that several registered names end in, is refused in one line."""
        key = schedules_stored.schedule_key(name)
        if key is None and job_rows.all_jobs(self.database, {name}):
            return name
        if queries.has_runs(self.database, name):
            return name
        if key is not None:
            with self.database.transaction() as connection:
                if schedules_stored.read(connection, key) is None:
                    raise UserError(f"schedule {key!r}: key: no such schedule, and no run of it")
            return name
        registered = [row.name for row in job_rows.all_jobs(self.database)]
        full = job_names.resolve(name, registered)
        if full is None:
            raise UserError(
                f"job {name!r}: name: unknown to this database (no job registered by this "
                "name or ending so, and no run of it)"
            )
        return full

    def pause(self, job: str) -> None:
        """Pause the job on every node: its periods are recorded skipped (reason paused)."""
        self._set_paused(job, paused=True)

    def resume(self, job: str) -> None:
        """Resume the job; the periods that passed while it was paused are not caught up."""
        self._set_paused(job, paused=False)

    # -- periods deferred by a catch-up budget -----------------------------------------

    def deferred(self, job: str | None = None) -> list[DeferredPeriods]:
        """Per job (or the one job): the periods its catch-up budget deferred, waiting
        for an operator's answer or approved and waiting for a node."""
        if job is not None:
            self._known(job)
        return deferred_rows.deferred_periods(self.database, job)

    def run_deferred(self, job: str, *, oldest: int | None = None) -> int:
        """Catch up now: the job's deferred periods (the `oldest` N, or all) are claimed
        by the next catch-up pass of a node, oldest first, as manual runs outside the
        budget; how many."""
        self._known(job)
        return deferred_rows.approve(self.database, job, _oldest(job, oldest))

    def skip_deferred(self, job: str, *, oldest: int | None = None) -> int:
        """Skip: the job's deferred periods (the `oldest` N, or all) are recorded
        `skipped (budget)` and never run; how many."""
        self._known(job)
        return deferred_rows.skip(self.database, job, _oldest(job, oldest))

    def pools(self) -> list[PoolState]:
        """Every pool a registration declared: its limits in force (and the code's), what
        runs in it now, and what waits for a slot and since when."""
        return concurrency.states(self.database)

    def set_pool(
        self,
        name: str,
        *,
        limit: int | None = None,
        per_key: int | None = None,
        by: str = "admin",
    ) -> PoolState:
        """An operator's limits for a pool, in force on every node's next start and kept
        over the code's until `reset_pool`."""
        if limit is None and per_key is None:
            raise UserError(f"pool {name!r}: limit: give --limit, --per-key or both")
        for field, value in (("limit", limit), ("per_key", per_key)):
            if value is not None and (isinstance(value, bool) or value < 1):
                raise UserError(f"pool {name!r}: {field}: must be a whole number ≥ 1, got {value}")
        self._known_pool(name)
        concurrency.change(self.database, name, limit=limit, per_key=per_key, by=by)
        return self._known_pool(name)

    def reset_pool(self, name: str, *, by: str = "admin") -> PoolState:
        """Back to the limits the code declares."""
        self._known_pool(name)
        concurrency.reset(self.database, name, by=by)
        return self._known_pool(name)

    def _known_pool(self, name: str) -> PoolState:
        for state in concurrency.states(self.database):
            if state.name == name:
                return state
        raise UserError(
            f"pool {name!r}: name: unknown to this database "
            "(a node declares a pool when it registers a job that names it)"
        )

    def _known(self, job: str) -> None:
        key = schedules_stored.schedule_key(job)
        if key is not None:
            with self.database.transaction() as connection:
                if schedules_stored.read(connection, key) is None:
                    raise UserError(f"schedule {key!r}: key: no such schedule")
            return
        if not job_rows.all_jobs(self.database, {job}):
            raise UserError(
                f"job {job!r}: name: unknown to this database "
                "(a node registers a job when it starts)"
            )

    def trigger(
        self,
        job: Job,
        *,
        node_name: str | None = None,
        grace: Span = DEFAULT_GRACE,
        stop: threading.Event | None = None,
    ) -> Outcome:
        """Run the job now, here, as a manual run; returns when it (and its retries) ended.

        `node_name` and `grace` are the CLI's `--node-name` and `--grace`; setting `stop`
        ends the run early, as SIGTERM does for the CLI.
        """
        foreground = self._foreground(job, node_name, grace, stop)
        foreground.open()
        try:
            claim = repair.trigger(foreground)
            foreground.run(claim)
        finally:
            foreground.close()
        return self._outcome(job.name, claim.period)

    def rerun(
        self,
        job: Job,
        period: Instant,
        *,
        force: bool = False,
        node_name: str | None = None,
        grace: Span = DEFAULT_GRACE,
        stop: threading.Event | None = None,
    ) -> Outcome:
        """Run a period again as its next attempt; a succeeded one only with `force`."""
        moment = _instant("PERIOD", period)
        foreground = self._foreground(job, node_name, grace, stop)
        target = repair.rerun_target(foreground, moment, force=force)
        foreground.open()
        try:
            claim = repair.rerun(foreground, target)
            if claim is None:
                raise UserError(f"job {job.name!r}: PERIOD: {_iso(moment)} changed meanwhile")
            foreground.run(claim)
        finally:
            foreground.close()
        return self._outcome(job.name, claim.period)

    def backfill(
        self,
        job: Job,
        start: Instant,
        end: Instant,
        *,
        include_failed: bool = False,
        dry_run: bool = False,
        node_name: str | None = None,
        grace: Span = DEFAULT_GRACE,
        stop: threading.Event | None = None,
    ) -> Backfill:
        """Run the periods from `start` to `end` that never succeeded, oldest first (or,
        with `dry_run`, only plan them)."""
        first, last = _instant("--from", start), _instant("--to", end)
        foreground = self._foreground(job, node_name, grace, stop)
        steps = repair.backfill_steps(foreground, first, last, include_failed=include_failed)
        if dry_run:
            return Backfill(steps)
        foreground.open()
        try:
            succeeded, failed = repair.run_backfill(foreground, steps)
            interrupted = foreground.stopped
        finally:
            foreground.close()
        foreground.log.info(
            "backfill_finished", succeeded=succeeded, failed=failed, interrupted=interrupted
        )
        return Backfill(steps, succeeded, failed, interrupted)

    # -- items ----------------------------------------------------------------------

    def release_item(self, job: str, key: str) -> ItemRow:
        """Forget an item, so that the next run that reaches it handles it again; the
        item as it was. Refused while the attempt that claimed it still runs."""
        job = self.recorded_job(job)
        row = self._settled(job, key)
        if not stored_items.release_item(self.database, job, key):
            raise UserError(f"job {job!r}: key {key!r}: changed meanwhile; look again")
        return row

    def mark_item_done(self, job: str, key: str) -> bool:
        """Record a stuck item as done, once its effect was checked; False if it was
        done already."""
        job = self.recorded_job(job)
        row = self._settled(job, key)
        if row.state == ItemState.DONE:
            return False
        if not stored_items.mark_done(self.database, job, key):
            raise UserError(f"job {job!r}: key {key!r}: changed meanwhile; look again")
        return True

    # -- asking a running node --------------------------------------------------------

    def request_trigger(self, job: str, *, by: str) -> str:
        """Ask a running node that knows the job to run it now, as a manual run (what
        `trigger` does here, in the foreground); the request's id."""
        self._job(job)
        return asked.add(self.database, Draft(job, RequestKind.TRIGGER, by))

    def request_rerun(self, job: str, period: Instant, *, force: bool = False, by: str) -> str:
        """Ask a running node to run a period again as its next attempt; refused here
        at once for what `rerun` refuses (no run, still running, succeeded without
        `force`), and checked again by the node."""
        moment = _instant("PERIOD", period)
        repair.rerun_row(self.database, self._job(job).name, moment, force=force)
        draft = Draft(job, RequestKind.RERUN, by, period=moment, force=force)
        return asked.add(self.database, draft)

    def request_backfill(
        self, job: str, start: Instant, end: Instant, *, include_failed: bool = False, by: str
    ) -> str:
        """Ask a running node to backfill a range; refused here for a range `backfill`
        refuses, planned again by the node when it takes it."""
        first, last = _instant("--from", start), _instant("--to", end)
        self.preview_backfill(job, first, last, include_failed=include_failed)
        draft = Draft(
            job,
            RequestKind.BACKFILL,
            by,
            range_start=first,
            range_end=last,
            include_failed=include_failed,
        )
        return asked.add(self.database, draft)

    def preview_backfill(
        self, job: str, start: Instant, end: Instant, *, include_failed: bool = False
    ) -> list[Step]:
        """What a backfill of the range would do with each period (`backfill --dry-run`),
        from the stored schedule: no job code needed."""
        row = self._job(job)
        if not row.cron:
            raise UserError(f"job {job!r}: cron: a template has no periods of its own to backfill")
        first, last = _instant("--from", start), _instant("--to", end)
        return repair.plan_range(
            self.database,
            row.name,
            parse_schedule(row.cron, row.timezone),
            first,
            last,
            now=queries.clock(self.database),
            include_failed=include_failed,
        )

    def requests(self, job: str | None = None, *, limit: int = 20) -> list[RequestRow]:
        """The newest requests and how they went, of one job or of every job."""
        return asked.recent(self.database, job, limit)

    def request(self, request_id: str) -> RequestRow:
        """One request by the id `request_trigger` and the others returned: who asked,
        which node took it, and its outcome; a `UserError` when there is none."""
        found = asked.get(self.database, request_id)
        if found is None:
            raise UserError(f"no request with id {request_id!r}")
        return found

    # -- helpers --------------------------------------------------------------------

    @property
    def schedules(self) -> Schedules:
        """The schedules created at run time, on this database (`scheduler.schedules`)."""
        return Schedules(self.database)

    def _job(self, name: str) -> JobRow:
        rows = job_rows.all_jobs(self.database, [name])
        if not rows:
            raise UserError(
                f"job {name!r}: name: unknown to this database "
                "(a node registers a job when it starts)"
            )
        return rows[0]

    def _settled(self, job: str, key: str) -> ItemRow:
        """The item, unless it is missing or its run is still handling it."""
        row = stored_items.get_item(self.database, job, key)
        if row is None:
            raise UserError(f"job {job!r}: key {key!r}: no such item")
        if row.in_progress:
            raise UserError(
                f"job {job!r}: key {key!r}: attempt {row.attempt} of run {row.run_id} is still "
                "handling it; wait until that run ends"
            )
        return row

    def _foreground(
        self, job: Job, node_name: str | None, grace: Span, stop: threading.Event | None
    ) -> Foreground:
        """This process as a one-shot node for `job` (the `@job` function); nothing
        written yet."""
        if not isinstance(job, Job):
            raise UserError(f"job {job!r}: give the @job function itself, not its name")
        # The run path only for the commands that run something: `runs`, `check` and the
        # console read through this class too, and should not load it.
        from scheduler.node.foreground import Foreground  # noqa: PLC0415

        return Foreground(
            self.database,
            job,
            node_identity(node_name),
            _span("--grace", grace),
            stop or threading.Event(),
            register=False,  # a run by hand: the job stays as the fleet registered it
        )

    def _outcome(self, job: str, period: datetime) -> Outcome:
        row = queries.run_at(self.database, job, period)
        assert row is not None, "a run this process claimed has a row"
        status = row.status
        return Outcome(row.id, job, period, status, status == RunStatus.SUCCEEDED)

    def _set_paused(self, job: str, *, paused: bool) -> None:
        if not job_rows.set_paused(self.database, job, paused=paused):
            raise UserError(
                f"job {job!r}: name: unknown to this database "
                "(a node registers a job when it starts)"
            )

    def _since(self, since: Instant | Span | None) -> datetime | None:
        if since is None:
            return None
        if isinstance(since, datetime):
            return _instant("--since", since)
        if isinstance(since, timedelta):
            return queries.clock(self.database) - since
        try:
            span = parse_option_duration("--since", since)
        except UserError:
            return _instant("--since", since)
        return queries.clock(self.database) - span

    def _find(self, run: str, period: Instant | None) -> RunRow:
        if period is None:
            found = queries.run_by_id(self.database, run)
            if found is None and RUN_ID_PREFIX.fullmatch(run):
                # The first characters a terminal's log line shows.
                matches = queries.runs_by_id_prefix(self.database, run)
                if len(matches) > 1:
                    raise UserError(
                        f"run id {run!r}: more than one run's id begins so; give more of it"
                    )
                found = matches[0] if matches else None
            if found is None:
                raise UserError(
                    f"no run with id {run!r} (give the run_id of a log line, or JOB PERIOD)"
                )
            return found
        moment = _instant("PERIOD", period)
        run = self.recorded_job(run)
        found = queries.run_at(self.database, run, moment)
        if found is not None or moment.microsecond:
            if found is None:
                raise UserError(f"no run of job {run!r} for period {_iso(moment)}")
            return found
        within = queries.runs_within(self.database, run, moment, moment + SECOND)
        if len(within) == 1:
            return within[0]
        if within:
            periods = ", ".join(_iso(row.period) for row in within)
            raise UserError(
                f"job {run!r}: PERIOD: {len(within)} runs within {_iso(moment)}: {periods}; "
                "give one in full"
            )
        raise UserError(f"no run of job {run!r} for period {_iso(moment)}")


# A run id's beginning, as a terminal's log line shows it (ids are 32 lowercase hex).
RUN_ID_PREFIX = re.compile(r"[0-9a-f]{6,31}")


def _names(value: str | Iterable[str]) -> Sequence[str]:
    return (value,) if isinstance(value, str) else tuple(value)


def _instant(option: str, value: Instant) -> datetime:
    """An instant as the CLI reads it; a naive datetime is UTC, as a time without an
    offset is."""
    if not isinstance(value, datetime):
        return parse_instant(option, value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _span(option: str, value: Span) -> timedelta:
    return value if isinstance(value, timedelta) else parse_option_duration(option, value)


def _iso(moment: datetime) -> str:
    return iso(moment) or ""


def _oldest(job: str, oldest: int | None) -> int | None:
    if oldest is None:
        return None
    if isinstance(oldest, bool) or not isinstance(oldest, int) or oldest < 1:
        raise UserError(f"job {job!r}: oldest: must be a whole number ≥ 1, got {oldest!r}")
    return oldest
