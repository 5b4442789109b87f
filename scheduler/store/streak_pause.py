"""The pause the scheduler makes when a job's failure streak reaches
`pause_after_failures` (see `store.streaks`): written in the outcome's transaction,
recorded like an operator's pause but with its reason, and undone the same way."""

from __future__ import annotations

from scheduler.model import Finish
from scheduler.store import jobs, streaks
from scheduler.store.database import Connection, Database
from scheduler.store.schedules import SCHEDULES, schedule_key


def pause_for(database: Database, connection: Connection, outcome: Finish, streak: int) -> bool:
    """Pause the job (or schedule) whose final failure made `pause_after` periods in a
    row, inside the outcome's transaction; False when it was paused already."""
    claim = outcome.claim
    reason = streaks.pause_reason(streak)
    now = database.now
    key = schedule_key(claim.job)
    if key is not None:
        changed = connection.execute(
            f"""UPDATE {SCHEDULES} SET paused = TRUE, paused_at = {now}, pause_reason = :reason,
                    updated_at = {now}, version = version + 1
                WHERE key = :key AND NOT paused AND deleted_at IS NULL""",
            {"key": key, "reason": reason},
        ).rowcount
        return bool(changed)
    return jobs.pause_in(database, connection, claim.job, reason)
