"""The pause the scheduler makes when a job's failure streak reaches
`pause_after_failures` (see `store.streaks`): written in the outcome's transaction,
recorded like an operator's pause but with its reason, and undone the same way."""

from __future__ import annotations

from scheduler.model import Finish
from scheduler.store import streaks
from scheduler.store.database import Connection, Database
from scheduler.store.jobs import JOBS, PAUSES
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
    else:
        paused = connection.execute(
            f"""UPDATE {JOBS} SET paused = TRUE, paused_at = {now}, pause_reason = :reason
                WHERE name = :name AND NOT paused RETURNING paused_at""",
            {"name": claim.job, "reason": reason},
        ).first()
        changed = 0 if paused is None else 1
        if paused is not None:
            connection.execute(
                f"INSERT INTO {PAUSES} (job, paused_at, reason) VALUES (:job, :at, :reason)",
                {"job": claim.job, "at": paused.paused_at, "reason": reason},
            )
    return bool(changed)
