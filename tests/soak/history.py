"""Gathering what the soak left behind into the checker's `History`: the ledger, the
tables (read at the end of the settle, before the nodes stop), the nodes' logs, the
fault log, and the periods each job owed in the judged window."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from scheduler.policy import Isolation
from scheduler.registry import Job
from scheduler.schedules import Schedule, Schedules
from tests.soak import jobs as soak_jobs
from tests.soak.checker import AttemptRow, ItemRow, JobSpec, NodeEvent, RunRow
from tests.soak.jobs import ITEMS_DDL, ITEMS_JOB, ITEMS_TABLE, NON_COOPERATIVE

# The node log lines the rules read.
EVENTS = (
    "node_started",
    "run_orphaned",
    "lease_lost",
    "run_abandoned",
    "run_timed_out",
    "run_given_up",
    # An outcome's line, said once its write committed: until then a peer sees the run
    # in hand (rule 3's occupancy).
    "run_succeeded",
    "run_failed",
)


def soak_jobs_defined() -> list[Job]:
    return [value for value in vars(soak_jobs).values() if isinstance(value, Job)]


def job_specs(
    start: float, settle: float, schedules: Sequence[Schedule] = ()
) -> dict[str, JobSpec]:
    """Each job's overlap and isolation, and the periods it owes in [start, settle); the
    schedules created at run time as jobs of their own (`@<key>`), of their template's
    overlap."""
    low = datetime.fromtimestamp(start, UTC) - timedelta(microseconds=1)
    high = datetime.fromtimestamp(settle, UTC)
    specs = {}
    templates = {job.name: job for job in soak_jobs_defined()}
    for schedule in schedules:
        template = templates[schedule.job]
        periods = schedule.trigger.periods_between(low, high, 1_000_000)
        specs[schedule.run_job] = JobSpec(
            name=schedule.run_job,
            overlap=template.policy.overlap.value,
            process=False,
            due=tuple(p for p in periods if p.timestamp() < settle),
            non_cooperative=False,
            items=False,
        )
    for job in soak_jobs_defined():
        if job.schedule is None:
            continue
        due = tuple(p for p in job.schedule.periods_between(low, high) if p.timestamp() < settle)
        specs[job.name] = JobSpec(
            name=job.name,
            overlap=job.policy.overlap.value,
            process=job.policy.isolation is Isolation.PROCESS,
            due=due,
            non_cooperative=job.name == NON_COOPERATIVE,
            items=job.name == ITEMS_JOB,
            pool=job.policy.pool.name if job.policy.pool else None,
            pool_limit=job.policy.pool.limit if job.policy.pool else 0,
        )
    return specs


def create_items_table(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(ITEMS_DDL)


def _seconds(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


def create_schedules(url: str) -> list[Schedule]:
    """The soak's schedules created at run time (`jobs.SCHEDULES`), once a node has
    registered their template; straight to the server, not through a node's proxy."""
    with Schedules(url) as schedules:
        return [
            schedules.create(key, soak_jobs.TEMPLATE, every=every, args={"seconds": seconds})
            for key, (every, seconds) in soak_jobs.SCHEDULES.items()
        ]


def read_tables(url: str) -> tuple[list[RunRow], list[AttemptRow]]:
    names = [job.name for job in soak_jobs_defined()] + [f"@{key}" for key in soak_jobs.SCHEDULES]
    with psycopg.connect(url) as connection:
        runs = connection.execute(
            "SELECT job, period, id, status, reason, origin, attempt, holder, claimed_at,"
            " started_at, finished_at FROM scheduler_runs WHERE job = ANY(%s)",
            (names,),
        ).fetchall()
        attempts = connection.execute(
            "SELECT run_id, attempt, job, period, node, status, reason, started_at, finished_at"
            " FROM scheduler_attempts WHERE job = ANY(%s)",
            (names,),
        ).fetchall()
    return (
        [
            RunRow(
                job=r[0],
                period=r[1],
                run_id=r[2],
                status=r[3],
                reason=r[4],
                origin=r[5],
                attempt=r[6],
                holder=r[7],
                claimed_at=r[8].timestamp(),
                started_at=_seconds(r[9]),
                finished_at=_seconds(r[10]),
            )
            for r in runs
        ],
        [
            AttemptRow(
                run_id=a[0],
                attempt=a[1],
                job=a[2],
                period=a[3],
                node=a[4],
                status=a[5],
                reason=a[6],
                started_at=_seconds(a[7]),
                finished_at=_seconds(a[8]),
            )
            for a in attempts
        ],
    )


def read_items(url: str) -> list[ItemRow]:
    with psycopg.connect(url) as connection:
        found = connection.execute(f"SELECT key, run_id, attempt, node FROM {ITEMS_TABLE}")
        return [ItemRow(*row) for row in found.fetchall()]


def _event(raw: dict[str, Any]) -> NodeEvent:
    attempt = raw.get("attempt")
    return NodeEvent(
        event=raw["event"],
        node=str(raw.get("node", "")),
        wall=datetime.fromisoformat(raw["timestamp"]).timestamp(),
        run_id=raw.get("run_id"),
        attempt=int(attempt) if isinstance(attempt, int) else None,
        pid=raw.get("pid") if isinstance(raw.get("pid"), int) else None,
    )


def read_events(paths: Iterable[Path], wanted: Sequence[str] = EVENTS) -> list[NodeEvent]:
    found = []
    for path in paths:
        for text in path.read_text(errors="replace").splitlines():
            try:
                raw = json.loads(text)
            except json.JSONDecodeError:
                continue
            if isinstance(raw, dict) and raw.get("event") in wanted and "timestamp" in raw:
                found.append(_event(raw))
    return found
