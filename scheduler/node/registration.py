"""Writing the loaded jobs to the jobs table, so that read-only commands (views,
`check`) know every job's schedule and policy without importing its code; and their
set under its digest, by which a node selects its own jobs' requests and alert events
(`store.job_sets`)."""

from __future__ import annotations

from collections.abc import Mapping

from scheduler import calendars, logs
from scheduler.instants import utc_text
from scheduler.node.peers import jobs_digest
from scheduler.registry import TEMPLATE_CRON, Job, pools_of
from scheduler.store import concurrency, job_sets
from scheduler.store import jobs as job_rows
from scheduler.store.database import Database


def register(database: Database, jobs: Mapping[str, Job]) -> None:
    job_rows.register(database, [definition_row(job) for job in jobs.values()])
    job_sets.record(database, jobs_digest(jobs.values()), list(jobs))
    concurrency.declare(database, pools_of(jobs.values()).values())
    log = logs.get_logger()
    # The host's clock (a virtual one under `scheduler.testing`): the line says when, it
    # decides nothing.
    now = database.time_source.wall()
    for job in jobs.values():
        upcoming = job.schedule.next_after(now) if job.schedule else None
        log.info(
            "job_registered",
            job=job.name,
            cron=job.schedule.expression if job.schedule else "template",
            timezone=job.schedule.timezone if job.schedule else "UTC",
            # When it is next due (a template's runs come from its schedules: none).
            next_period=utc_text(upcoming) if upcoming else None,
        )


def definition_row(job: Job) -> job_rows.JobDefinitionRow:
    policy = job.policy
    return job_rows.JobDefinitionRow(
        name=job.name,
        cron=job.schedule.expression if job.schedule else TEMPLATE_CRON,
        timezone=job.schedule.timezone if job.schedule else "UTC",
        lease_seconds=policy.lease.total_seconds(),
        timeout_seconds=policy.timeout.total_seconds() if policy.timeout else None,
        retries=policy.retries,
        alert_after_seconds=policy.overdue_after.total_seconds(),
        calendars=calendars.stored_text(job.calendars),
    )
