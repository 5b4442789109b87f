"""A nightly cleanup: deleting is safe to repeat, so it needs no items.

It deletes in small batches, each its own short transaction, so that the
application never waits long behind it, and stops between batches when asked.
Measured from the period rather than the clock, a retry or a re-run of an old
night deletes what that night would have.
"""

from __future__ import annotations

from sqlalchemy import delete, select

from jobs.app import engine, sessions
from scheduler import RunContext, job

BATCH = 500


@job(cron="30 2 * * *", name="cleanup", retries=2, timeout="30m")
def cleanup(ctx: RunContext) -> None:
    """At 02:30 UTC, delete the sessions that had expired by then."""
    deleted = 0
    while not ctx.cancelled.is_set():
        expired = select(sessions.c.id).where(sessions.c.expires_at < ctx.period).limit(BATCH)
        with engine().begin() as connection:
            count = connection.execute(
                delete(sessions).where(sessions.c.id.in_(expired.scalar_subquery()))
            ).rowcount
        deleted += count
        if count < BATCH:
            break
    ctx.log.info("sessions_deleted", count=deleted)
