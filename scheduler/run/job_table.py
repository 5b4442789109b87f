"""The jobs a node can run, by the name their runs carry: its code-declared jobs, and
the schedules created at run time over them (`@<key>`), each as its job's function with
the schedule's arguments and catch-up policy.

A schedule's job is built from its row when a run of it is first seen here (a pass
hands over the rows it fired, so a burst reads nothing more) and kept in a bounded
cache: a node never holds every schedule in memory. A name that is not this node's (no
such schedule, or one whose job this node does not run: recovery asks of every stale
run) is remembered as absent for as long, so that a sweep does not read its row again
for each; a read that failed is not remembered.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from scheduler.firing import policy_with
from scheduler.registry import Job
from scheduler.store import schedules as stored
from scheduler.store.database import Database
from scheduler.store.faults import StoreError
from scheduler.store.schedules import ScheduleRow

# Schedules' jobs kept at once (each a few hundred bytes and its arguments: twice what
# a node holds in hand, `node.schedule_loop.IN_HAND_MAX`), and for how long: a pass
# hands its rows over just before their runs are looked up; a retry later reads the
# row again, so that it runs with the schedule's arguments of then.
KEPT = 4096
KEPT_S = 5.0


class JobTable(Mapping[str, Job]):
    """A mapping from a run's job name to the `Job` that runs it. Iterating, `len` and
    `values` see the code-declared jobs alone; a schedule's is found by name."""

    def __init__(self, jobs: Mapping[str, Job], database: Database | None = None) -> None:
        self._jobs = dict(jobs)
        self._database = database
        self._kept: OrderedDict[str, tuple[Job, float]] = OrderedDict()
        self._absent: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> Job:
        found = self._jobs.get(name)
        if found is not None:
            return found
        key = stored.schedule_key(name)
        if key is None:
            raise KeyError(name)
        with self._lock:
            now = time.monotonic()
            kept = self._kept.get(name)
            if kept is not None and now - kept[1] < KEPT_S:
                self._kept.move_to_end(name)
                return kept[0]
            absent = self._absent.get(name)
            if absent is not None and now - absent < KEPT_S:
                raise KeyError(name)
        try:
            row = self._read(key)
        except StoreError:
            raise KeyError(name) from None
        job = self.learn(row) if row is not None else None
        if job is None:
            with self._lock:
                self._absent[name] = time.monotonic()
                self._absent.move_to_end(name)
                while len(self._absent) > KEPT:
                    self._absent.popitem(last=False)
            raise KeyError(name)
        return job

    def __iter__(self) -> Iterator[str]:
        return iter(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        try:
            self[name]
        except KeyError:
            return False
        return True

    @property
    def code(self) -> Mapping[str, Job]:
        return self._jobs

    def learn(self, row: ScheduleRow) -> Job | None:
        """The job of a schedule's runs as its row now says (None if this node does not
        run the schedule's job), kept for the next time."""
        template = self._jobs.get(row.job)
        if template is None:
            return None
        job = schedule_job(template, row)
        with self._lock:
            self._absent.pop(job.name, None)
            self._kept[job.name] = (job, time.monotonic())
            self._kept.move_to_end(job.name)
            while len(self._kept) > KEPT:
                self._kept.popitem(last=False)
        return job

    def _read(self, key: str) -> ScheduleRow | None:
        """The schedule's row, None if there is none; StoreError if it cannot be read."""
        if self._database is None:
            return None
        with self._database.transaction() as connection:
            return stored.read(connection, key)


def schedule_job(template: Job, row: ScheduleRow) -> Job:
    """The template's function and policy under the schedule's name, arguments and
    catch-up choices."""
    arguments: dict[str, Any] = json.loads(row.args)
    return replace(
        template,
        name=stored.run_job(row.key),
        policy=policy_with(
            template.policy,
            row.catchup,
            row.catchup_window_seconds,
            row.catchup_limit,
            row.jitter_seconds,
        ),
        args=arguments,
        template=template.name,
    )
