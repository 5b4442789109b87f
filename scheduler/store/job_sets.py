"""Job sets: the jobs of each set a node was started with, under the set's digest.

A node asks every second (or every heartbeat) for the requests and alert events of its
own jobs. Sending its names each time costs 10,000 parameters for a node with 10,000
jobs; reading every job's rows and keeping its own lets other jobs' rows (a removed
job's, another fleet's) crowd its own out of a page. So a node writes its set once, at
registration, and the statements join on it: `member_of` below.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from scheduler.store.database import Database

JOB_SETS = "scheduler_job_sets"
NODES = "scheduler_nodes"
JOBS = "scheduler_jobs"


def record(database: Database, digest: str, jobs: Collection[str]) -> None:
    """Write the set `digest` names (again: its `registered_at` is now)."""
    if not jobs:
        return
    now = database.now
    upsert = f"""
        INSERT INTO {JOB_SETS} (job, digest, registered_at) {{source}}
        ON CONFLICT (job, digest) DO UPDATE SET registered_at = excluded.registered_at
    """
    with database.transaction() as connection:
        if database.arrays:
            source = f"SELECT job, :digest, {now} FROM unnest(CAST(:jobs AS TEXT[])) AS job"
            connection.execute(
                upsert.format(source=source), {"digest": digest, "jobs": sorted(jobs)}
            )
            return
        connection.execute_many(
            upsert.format(source=f"VALUES (:job, :digest, {now})"),
            [{"job": job, "digest": digest} for job in sorted(jobs)],
        )


SCHEDULES = "scheduler_schedules"


def code_job(alias: str) -> str:
    """SQL: the code-declared job whose function runs the row's job (`alias`): the job
    itself, or for a schedule created at run time (`@<key>`) the job its row names."""
    return (
        f"CASE WHEN {alias}.job LIKE '@%' THEN (SELECT schedule.job FROM {SCHEDULES} AS schedule"
        f" WHERE schedule.key = substr({alias}.job, 2)) ELSE {alias}.job END"
    )


def member_of(alias: str, digest: str = ":job_set") -> str:
    """SQL: the row `alias` (with a `job` column) is of a job of the set `digest` (SQL: a
    parameter, or a subquery); a schedule's row, if its job is."""
    return (
        f"EXISTS (SELECT 1 FROM {JOB_SETS} AS member"
        f" WHERE member.job = {code_job(alias)} AND member.digest = {digest})"
    )


def own_digest(node_parameter: str = ":own_id") -> str:
    """SQL: the digest of the set the node (a parameter naming its id) registered with."""
    return f"(SELECT jobs_digest FROM {NODES} WHERE id = {node_parameter})"


def known_since(alias: str, since: str) -> str:
    """SQL: somebody may still run the row's job (`alias`): it was registered since
    `since` (SQL; by a node or a one-shot command), or a node that has not stopped and
    was heard from since then was started with a set that holds it."""
    return f"""(EXISTS (SELECT 1 FROM {JOBS} AS registered
            WHERE registered.name = {code_job(alias)} AND registered.last_seen >= {since})
        OR EXISTS (SELECT 1 FROM {JOB_SETS} AS member
            JOIN {NODES} AS node ON node.jobs_digest = member.digest
            WHERE member.job = {code_job(alias)} AND node.stopped_at IS NULL
              AND node.heartbeat_at >= {since}))"""


def prune(database: Database, cutoff: datetime, *, dry_run: bool = False) -> int:
    """Delete (or count) the sets no node has registered since the cutoff and no node
    heard from since then runs."""
    unused = f"""registered_at < :cutoff AND NOT EXISTS (
        SELECT 1 FROM {NODES} AS node WHERE node.jobs_digest = {JOB_SETS}.digest
          AND node.stopped_at IS NULL AND node.heartbeat_at >= :cutoff)"""
    with database.transaction() as connection:
        if dry_run:
            statement = f"SELECT count(*) FROM {JOB_SETS} WHERE {unused}"
            return int(connection.execute(statement, {"cutoff": cutoff}).scalar())
        statement = f"DELETE FROM {JOB_SETS} WHERE {unused}"
        return connection.execute(statement, {"cutoff": cutoff}).rowcount
