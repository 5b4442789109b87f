"""Rows written straight into the tables, as nodes would have left them, for read-only views."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler.store.database import Database
from tests.sql import insert
from tests.sql import rows as table_rows


def now() -> datetime:
    return datetime.now(UTC)


def add_job(
    database: Database,
    name: str,
    cron: str,
    *,
    first_seen: datetime,
    paused: bool = False,
    alert_after: float = 60,
    retries: int = 0,
    timezone: str = "UTC",
    last_seen: datetime | None = None,
) -> None:
    with database.transaction() as connection:
        insert(
            connection,
            "scheduler_jobs",
            name=name,
            cron=cron,
            timezone=timezone,
            first_seen=first_seen,
            last_seen=last_seen or first_seen,
            paused=paused,
            paused_at=now() if paused else None,
            lease_seconds=30,
            timeout_seconds=None,
            retries=retries,
            alert_after_seconds=alert_after,
        )


def add_run(
    database: Database,
    job: str,
    period: datetime,
    status: str,
    *,
    attempt: int = 1,
    holder: str | None = "node-a",
    reason: str | None = None,
    finished_at: datetime | None = None,
    duration_ms: int | None = None,
    error: str | None = None,
    retry_at: datetime | None = None,
    claimed_at: datetime | None = None,
    origin: str = "schedule",
    pool: str | None = None,
    lease_expires_at: datetime | None = None,
) -> str:
    run_id = uuid.uuid4().hex
    started = period + timedelta(milliseconds=5) if status not in ("skipped", "missed") else None
    with database.transaction() as connection:
        insert(
            connection,
            "scheduler_runs",
            id=run_id,
            job=job,
            period=period,
            status=status,
            reason=reason,
            origin=origin,
            attempt=attempt,
            holder=holder,
            lease_seconds=30,
            claimed_at=claimed_at or period,
            started_at=started,
            finished_at=finished_at,
            duration_ms=duration_ms,
            error_type="builtins.ValueError" if error else None,
            error_message=error,
            error_traceback=f"Traceback (most recent call last):\nValueError: {error}"
            if error
            else None,
            retry_at=retry_at,
            pool=pool,
            lease_expires_at=lease_expires_at,
        )
    return run_id


def add_attempt(
    database: Database, run_id: str, job: str, period: datetime, attempt: int, error: str
) -> None:
    with database.transaction() as connection:
        insert(
            connection,
            "scheduler_attempts",
            run_id=run_id,
            attempt=attempt,
            job=job,
            period=period,
            node=f"node-{attempt}",
            status="failed",
            started_at=period,
            finished_at=period + timedelta(seconds=1),
            duration_ms=1000,
            error_type="builtins.RuntimeError",
            error_message=error,
            error_traceback=f"Traceback (most recent call last):\nRuntimeError: {error}",
        )


def add_node(
    database: Database,
    node_id: str,
    *,
    heartbeat_at: datetime,
    stopped_at: datetime | None = None,
    started_at: datetime | None = None,
    digest: str | None = None,
) -> None:
    with database.transaction() as connection:
        insert(
            connection,
            "scheduler_nodes",
            id=node_id,
            name=node_id,
            host="host-1",
            pid=42,
            version="0.1.0",
            started_at=started_at or heartbeat_at - timedelta(minutes=5),
            heartbeat_at=heartbeat_at,
            stopped_at=stopped_at,
            jobs_digest=digest,
        )


def add_item(
    database: Database, job: str, key: str, period: datetime, run_id: str, *, state: str = "claimed"
) -> None:
    """An item as the run `run_id` (attempt 1) claimed it."""
    with database.transaction() as connection:
        insert(
            connection,
            "scheduler_items",
            job=job,
            key=key,
            state=state,
            period=period,
            run_id=run_id,
            attempt=1,
            node="node-a",
            claimed_at=period,
            done_at=period if state == "done" else None,
        )


def rows(database: Database, table: str) -> list[dict[str, Any]]:
    """Every row of a table (`scheduler_runs`, …), as mappings."""
    return table_rows(database, table)
