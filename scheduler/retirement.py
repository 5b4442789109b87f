"""Which registered jobs are retired: taken out of the code that ran them. A retired
job keeps its history; `scheduler check` and the per-job metrics leave it out, and
`scheduler jobs` shows it as retired.

Every command that runs jobs on schedule (`run`, `run-once`) registers them (writes
`last_seen`) just before it writes its node row, so a node that runs a job started at
most a moment after the job was last registered; a run by hand (`trigger`, `rerun`,
`backfill`) registers nothing. A job is retired when

1. a daemon node is alive (with every node down nothing is retired: `check` must
   still report what stopped running);
2. no node that may still run it registered it: every node that is alive, or that went
   silent without stopping (lost) within the last day, started more than
   REGISTRATION_SLACK after the job's last registration; and
3. when a one-shot command (`run-once` from a CronJob) registered it last, two of its
   periods have fallen due since: a job that only a CronJob runs registers at each of
   its periods, so one CronJob that stops starting pods is still reported (overdue)
   for one period before its job counts as retired.

A removed job of a long-running fleet is retired as soon as the last node that ran it
stopped; one that comes back (a node starts with it again) is watched again at once.
The rules err on the side of watching: a node that started before the job's last
registration may have registered it too, so a job that a CronJob runs beside
long-running daemons is retired only after those daemons restarted (until then,
`scheduler pause` quiets it).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduler.cron import Schedule, parse_schedule
from scheduler.model import ONE_SHOT, JobRow
from scheduler.store import queries
from scheduler.store.database import Database
from scheduler.store.queries import NodeRow

# Between a command registering its jobs and writing its node row (seconds at most).
REGISTRATION_SLACK = timedelta(minutes=1)
# A lost node (killed, cut off) may come back with its jobs for this long.
LOST_NODES_KEPT = timedelta(days=1)
_SECOND = timedelta(seconds=1)


@dataclass(frozen=True)
class Fleet:
    """What retirement needs to know of the nodes."""

    daemon_alive: bool
    # The earliest start of the nodes that may still run a job (alive, or lost lately).
    earliest_start: datetime | None
    # When one-shot commands started, in order.
    one_shot_starts: tuple[datetime, ...]


def fleet(
    nodes: Sequence[NodeRow],
    alive: Callable[[NodeRow], bool],
    now: datetime,
    one_shot_starts: Sequence[datetime] = (),
) -> Fleet:
    running = [
        node
        for node in nodes
        if alive(node) or (node.stopped_at is None and now - node.heartbeat_at < LOST_NODES_KEPT)
    ]
    return Fleet(
        daemon_alive=any(alive(node) and node.jobs_digest != ONE_SHOT for node in nodes),
        earliest_start=min((node.started_at for node in running), default=None),
        one_shot_starts=tuple(sorted(one_shot_starts)),
    )


def retired_among(
    database: Database, rows: Sequence[JobRow], alive: Callable[[NodeRow], bool], now: datetime
) -> set[str]:
    """The names of the retired jobs among `rows`; reads the nodes that matter only."""
    recent = queries.list_nodes(database, seen_since=now - LOST_NODES_KEPT)
    candidates = [row for row in rows if not carried(row.last_seen, fleet(recent, alive, now))]
    if not candidates:
        return set()
    since = min(row.last_seen for row in candidates)
    one_shots = queries.list_nodes(database, started_since=since, kind=ONE_SHOT)
    nodes = fleet(recent, alive, now, [node.started_at for node in one_shots])
    return {
        row.name
        for row in candidates
        # A template (no schedule of its own) no node may still run is retired.
        if not row.cron
        or retired(parse_schedule(row.cron, row.timezone), row.last_seen, nodes, now)
    }


def carried(last_seen: datetime, fleet: Fleet) -> bool:
    """Whether a node that may still run the job might have registered it (rules 1-2)."""
    if not fleet.daemon_alive or fleet.earliest_start is None:
        return True
    return fleet.earliest_start <= last_seen + REGISTRATION_SLACK


def retired(schedule: Schedule, last_seen: datetime, fleet: Fleet, now: datetime) -> bool:
    if carried(last_seen, fleet):
        return False
    if not _one_shot_registered(last_seen, fleet):
        return True
    latest = schedule.latest_at_or_before(now)
    before = schedule.latest_at_or_before(latest - _SECOND) if latest else None
    return before is not None and before > last_seen


def _one_shot_registered(last_seen: datetime, fleet: Fleet) -> bool:
    """A one-shot node started within the slack after the job's last registration."""
    starts = fleet.one_shot_starts
    index = bisect.bisect_left(starts, last_seen)
    return index < len(starts) and starts[index] <= last_seen + REGISTRATION_SLACK
