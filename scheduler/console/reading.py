"""What each console page shows, read from the database in a few statements whatever the
number of jobs (the overview's count does not grow with them: see bench/console.py)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from scheduler import calendars, retirement
from scheduler.admin import Admin, RunDetail
from scheduler.check import Finding, alive, is_lingering, lingering
from scheduler.console.grid import (
    Bar,
    GridRow,
    duration_bars,
    grid_row,
    matches,
    sort_key,
    upcoming,
)
from scheduler.durations import format_duration
from scheduler.model import ONE_SHOT, JobRow
from scheduler.schedules import Schedule, Schedules
from scheduler.store import checkpoints, overview, queries
from scheduler.store import deferred as deferred_rows
from scheduler.store import items as stored_items
from scheduler.store import requests as asked
from scheduler.store.concurrency import PoolState
from scheduler.store.database import Database
from scheduler.store.deferred import DeferredPeriods
from scheduler.store.items import ItemRow
from scheduler.store.jobs import all_jobs
from scheduler.store.overview import Active
from scheduler.store.queries import AttemptRow, NodeRow, RunRow
from scheduler.store.requests import RequestRow
from scheduler.store.schedules import schedule_key
from scheduler.views import merged_attempts, node_state

NODES_SHOWN_FOR = timedelta(days=1)
JOB_HISTORY = 200
SCHEDULE_HISTORY = 50
SCHEDULE_UPCOMING = 5
CHART_PERIODS = 60
# Nodes look for requests every second: one still untaken after this, with nodes alive,
# is probably of a job none of them runs.
UNTAKEN_AFTER = timedelta(seconds=10)


@dataclass(frozen=True)
class Fleet:
    """What the header of every page says about the nodes and the requests."""

    now: datetime
    daemons_alive: int
    pending_requests: int
    # Nodes of any kind heard from within NODE_SILENT_AFTER.
    alive: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Overview:
    fleet: Fleet
    rows: list[GridRow]
    jobs: int
    matching: int
    page: int
    pages: int
    retired: set[str] = field(default_factory=set)
    # The concurrency pools: their limits, what runs and what waits in each.
    pools: list[PoolState] = field(default_factory=list)


@dataclass(frozen=True)
class JobPage:
    fleet: Fleet
    job: JobRow
    state: str
    history: GridRow
    upcoming: list[tuple[datetime, datetime]]
    bars: list[Bar]
    longest_ms: int
    stuck: list[ItemRow]
    items: list[ItemRow]
    requests: list[RequestRow]
    # The calendars its periods skip, and which of them end within 30 days.
    calendars: list[calendars.Stored] = field(default_factory=list)
    ending: list[str] = field(default_factory=list)
    # Its periods deferred by its catch-up budget, if any wait.
    deferred: DeferredPeriods | None = None


@dataclass(frozen=True)
class RunPage:
    fleet: Fleet
    detail: RunDetail
    attempts: list[AttemptRow]
    checkpoint: str | None
    items: list[ItemRow]
    # Timed out with its function still running: what `scheduler check` says of it.
    lingering: Finding | None = None
    # The key of the schedule created at run time whose period this is (job `@<key>`).
    schedule: str | None = None


@dataclass(frozen=True)
class ScheduleFilters:
    # Keys that begin so (`tenant-42:`): one range of the primary key.
    prefix: str = ""
    job: str = ""
    # None: paused or not.
    paused: bool | None = None
    per: int = 100


@dataclass(frozen=True)
class ScheduleList:
    """One page of schedules in key order, and the key the next page starts after."""

    fleet: Fleet
    schedules: list[Schedule]
    next_after: str | None


@dataclass(frozen=True)
class SchedulePage:
    fleet: Fleet
    schedule: Schedule
    # active, paused, finished (a one-off that fired) or deleted.
    state: str
    upcoming: list[tuple[datetime, datetime]]
    catchup: str
    # Its own jitter, or the job's.
    jitter: str
    # Its recent periods: the runs of `@<key>`, newest first.
    runs: list[RunRow]
    # At most this many are read: the page says where to find the older ones.
    history: int = SCHEDULE_HISTORY
    # Its periods deferred by its job's catch-up budget, if any wait.
    deferred: DeferredPeriods | None = None


@dataclass(frozen=True)
class NodeView:
    node: NodeRow
    state: str
    kind: str
    running: list[Active]


def fleet(admin: Admin) -> Fleet:
    database = admin.database
    now = queries.clock(database)
    nodes = queries.list_nodes(database, seen_since=now - timedelta(minutes=1))
    living = [node for node in nodes if alive(node, now)]
    daemons = sum(1 for node in living if node.jobs_digest != ONE_SHOT)
    return Fleet(now, daemons, asked.count_pending(database), frozenset(node.id for node in living))


def read_overview(
    admin: Admin,
    *,
    name: str,
    statuses: Collection[str],
    page: int,
    per: int,
    periods: int,
    sort: str = "name",
) -> Overview:
    """One page of the grid: with a status filter every job's recent periods are read to
    find the matching ones, without it only those of the page's jobs; sorted by its
    newest period's status, every job's newest period is read first."""
    database = admin.database
    header = fleet(admin)
    jobs = all_jobs(database)
    named = [job for job in jobs if not name or name.lower() in job.name.lower()]
    if statuses:
        having = overview.jobs_with(database, [job.name for job in named], periods, statuses)
        named = [job for job in named if job.name in having or matches(job, [], "", statuses)]
    if sort != "name":
        newest = (
            overview.recent_cells(database, [job.name for job in named], 1)
            if sort == "last"
            else {}
        )
        named.sort(
            key=lambda job: sort_key(
                sort, job, next(iter(newest.get(job.name, [])), None), header.now
            )
        )
    pages = max((len(named) + per - 1) // per, 1)
    page = min(max(page, 1), pages)
    shown = named[(page - 1) * per : page * per]
    cells = overview.recent_cells(database, [job.name for job in shown], periods)
    retired = _retired(database, shown, header.now)
    rows = [grid_row(job, cells.get(job.name, []), header.now, ahead=2) for job in shown]
    return Overview(header, rows, len(jobs), len(named), page, pages, retired, admin.pools())


def read_job(admin: Admin, name: str) -> JobPage | None:
    database = admin.database
    found = all_jobs(database, [name])
    if not found:
        return None
    job = found[0]
    header = fleet(admin)
    cells = overview.recent_cells(database, [name], JOB_HISTORY).get(name, [])
    zone = ZoneInfo(job.timezone)
    coming = [(moment, moment.astimezone(zone)) for moment in upcoming(job, header.now, 5)]
    stuck = stored_items.list_items(database, name, stuck_only=True, limit=100)
    recent = [item for item in stored_items.list_items(database, name, limit=50) if not item.stuck]
    retired = _retired(database, [job], header.now)
    return JobPage(
        fleet=header,
        job=job,
        state="retired" if retired else ("paused" if job.paused else "active"),
        history=grid_row(job, cells, header.now, ahead=3),
        upcoming=coming,
        bars=duration_bars(cells[-CHART_PERIODS:], 600, 80),
        longest_ms=max((cell.duration_ms or 0 for cell in cells[-CHART_PERIODS:]), default=0),
        stuck=stuck,
        items=recent,
        requests=asked.recent(database, name, 10),
        calendars=calendars.stored(job.calendars),
        ending=[
            c.name for c in calendars.ending(calendars.stored(job.calendars), header.now.date())
        ],
        deferred=next(iter(deferred_rows.deferred_periods(database, name)), None),
    )


def read_run(admin: Admin, detail: RunDetail) -> RunPage:
    database = admin.database
    header = fleet(admin)
    run = detail.run
    return RunPage(
        fleet=header,
        detail=detail,
        attempts=merged_attempts(run, detail.attempts),
        checkpoint=checkpoints.load(database, run.id),
        items=overview.items_of_run(database, run.id),
        lingering=lingering(run, header.now) if is_lingering(run, header.now) else None,
        schedule=schedule_key(run.job),
    )


def read_schedules(
    admin: Admin, schedules: Schedules, filters: ScheduleFilters, *, after: str | None
) -> ScheduleList:
    """One page of the schedules that match, read as one range of the key (keyset):
    the same few statements with ten schedules or a million."""
    listing = schedules.list(
        filters.prefix,
        after=after,
        limit=filters.per,
        job=filters.job or None,
        paused=filters.paused,
    )
    return ScheduleList(fleet(admin), listing.schedules, listing.next_after)


def read_schedule(admin: Admin, schedules: Schedules, key: str) -> SchedulePage | None:
    """A schedule and its recent periods; a deleted one still, for the runs it left."""
    found = schedules.get(key)
    if found is None:
        # The first deleted key at or after `key` within its own prefix is `key` itself.
        deleted = schedules.list(key, limit=1, deleted=True).schedules
        found = deleted[0] if deleted and deleted[0].key == key else None
    if found is None:
        return None
    header = fleet(admin)
    runs = queries.list_runs(admin.database, jobs=[found.run_job], limit=SCHEDULE_HISTORY)
    return SchedulePage(
        fleet=header,
        schedule=found,
        state=_schedule_state(found),
        upcoming=_schedule_upcoming(found),
        catchup=_catchup_text(found),
        jitter=format_duration(found.jitter) if found.jitter is not None else "the job's",
        runs=runs,
        deferred=next(iter(deferred_rows.deferred_periods(admin.database, found.run_job)), None),
    )


def read_nodes(admin: Admin, *, everything: bool) -> tuple[Fleet, list[NodeView]]:
    """The daemons heard from within a day (every node with `everything`), and the runs
    each holds now."""
    database = admin.database
    header = fleet(admin)
    since = None if everything else header.now - NODES_SHOWN_FOR
    rows = queries.list_nodes(database, seen_since=since)
    if not everything:
        rows = [node for node in rows if node.jobs_digest != ONE_SHOT]
    held: dict[str | None, list[Active]] = defaultdict(list)
    for run in overview.in_progress(database):
        held[run.holder].append(run)
    views = [
        NodeView(
            node,
            node_state(node, header.now),
            "one-shot" if node.jobs_digest == ONE_SHOT else "daemon",
            held.get(node.id, []),
        )
        for node in rows
    ]
    return header, views


# A request's run, while it goes on after the request was carried out.
_RUN_UNDER_WAY = {
    "claimed": "claimed, not started yet",
    "queued": "queued for a worker",
    "running": "still running",
}


def _outcome_state(outcome: str, run: RunRow | None) -> str:
    if run is None:
        return outcome
    return f"{outcome}; its run: {_RUN_UNDER_WAY.get(run.status, run.status)}"


def request_runs(database: Database, requests: Collection[RequestRow]) -> dict[str, RunRow]:
    """The runs the requests started, by run id, read at once."""
    return queries.runs_by_ids(database, {row.run_id for row in requests if row.run_id})


def request_state(request: RequestRow, header: Fleet, run: RunRow | None = None) -> str:
    """Where a request stands, in words for the page: what an on-call engineer needs to
    know to wait, or to look and ask again. A request carried out says how its run is
    going (`done` while the run still goes would read as finished)."""
    if request.outcome is not None:
        return _outcome_state(request.outcome, run)
    if request.taken_by is not None:
        return _taken_state(request, request.taken_by, header)
    if request.tries:
        again = (
            "waiting for a node again (given back after a fault; the detail says how far it got)"
        )
        return again if header.daemons_alive else f"{again}: no node is alive"
    if header.daemons_alive == 0:
        return "waiting for a node: no node is alive; it runs when one that knows the job starts"
    if header.now - request.requested_at > UNTAKEN_AFTER:
        return (
            "waiting for a node: none of the live nodes took it; does any of them run this "
            "job? It expires unrun an hour after it was asked"
        )
    return "waiting for a node that knows the job (nodes look every second)"


def _taken_state(request: RequestRow, taker: str, header: Fleet) -> str:
    if request.taken_until is not None and request.taken_until <= header.now:
        return (
            f"taken by {taker}, whose hold ended before it finished: waiting for a node to "
            "take it again"
        )
    if taker in header.alive:
        return f"taken by {taker}"
    return (
        f"taken by {taker}, which stopped answering before it wrote the outcome: another "
        "node takes it again once its hold ends"
    )


def _schedule_state(schedule: Schedule) -> str:
    if schedule.deleted_at is not None:
        return "deleted"
    if schedule.paused:
        return "paused"
    return "active" if schedule.next_due is not None else "finished"


def _schedule_upcoming(schedule: Schedule) -> list[tuple[datetime, datetime]]:
    """Its next periods from the one due, in UTC and in its time zone; none while paused
    (a resume fires from then on, not these)."""
    if schedule.paused or schedule.deleted_at is not None:
        return []
    zone = ZoneInfo(schedule.trigger.timezone)
    found: list[tuple[datetime, datetime]] = []
    moment = schedule.next_due
    while moment is not None and len(found) < SCHEDULE_UPCOMING:
        found.append((moment, moment.astimezone(zone)))
        moment = schedule.trigger.next_after(moment)
    return found


def _catchup_text(schedule: Schedule) -> str:
    """Its own catch-up policy where it has one; the job's (`@job`) for the rest."""
    window, limit = schedule.catchup_window, schedule.catchup_limit
    own = [
        *([schedule.catchup] if schedule.catchup is not None else []),
        *([f"window {format_duration(window)}"] if window is not None else []),
        *([f"at most {limit} periods"] if limit is not None else []),
    ]
    if not own:
        return "the job's"
    return ", ".join(own) + ("" if len(own) == 3 else "; the job's for the rest")


def _retired(database: Database, jobs: list[JobRow], now: datetime) -> set[str]:
    if not jobs:
        return set()
    return retirement.retired_among(database, jobs, lambda node: alive(node, now), now)
