"""Operator requests: what the console asked the fleet to run, and how it went.

A process that must not run jobs itself (the web console) writes a row; a live node
that knows the job takes it with a compare-and-set of `taken_by` from NULL, so exactly
one node carries it out, and writes the outcome back on the same row.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from scheduler.store.database import Connection, Database
from scheduler.store.wakeups import Wake, notify_on

REQUESTS = "scheduler_requests"


class RequestKind(StrEnum):
    TRIGGER = "trigger"
    RERUN = "rerun"
    BACKFILL = "backfill"


class RequestOutcome(StrEnum):
    DONE = "done"  # claimed and handed to the node's workers
    REFUSED = "refused"  # the node found it could not be done (detail says why)
    EXPIRED = "expired"  # no node took it in time; nothing was run


@dataclass(frozen=True)
class Draft:
    """A request as the console asks it, before it has a row."""

    job: str
    kind: RequestKind
    requested_by: str
    period: datetime | None = None
    range_start: datetime | None = None
    range_end: datetime | None = None
    force: bool = False
    include_failed: bool = False


@dataclass(frozen=True)
class RequestRow:
    id: str
    job: str
    kind: str
    period: datetime | None
    range_start: datetime | None
    range_end: datetime | None
    force: bool
    include_failed: bool
    requested_at: datetime
    requested_by: str
    taken_by: str | None
    taken_at: datetime | None
    finished_at: datetime | None
    outcome: str | None
    detail: str | None
    run_id: str | None


_COLUMNS = ", ".join(RequestRow.__dataclass_fields__)


def _request(row: Any) -> RequestRow:
    values = row._asdict()
    values["force"], values["include_failed"] = bool(row.force), bool(row.include_failed)
    return RequestRow(**values)


def add(database: Database, draft: Draft) -> str:
    """Write the request for a node to take; its id."""
    request_id = uuid.uuid4().hex
    statement = f"""
        INSERT INTO {REQUESTS} (id, job, kind, period, range_start, range_end, force,
                                include_failed, requested_at, requested_by)
        VALUES (:id, :job, :kind, :period, :range_start, :range_end, :force,
                :include_failed, {database.now}, :requested_by)
    """
    parameters = {
        "id": request_id,
        "job": draft.job,
        "kind": draft.kind.value,
        "period": draft.period,
        "range_start": draft.range_start,
        "range_end": draft.range_end,
        "force": draft.force,
        "include_failed": draft.include_failed,
        "requested_by": draft.requested_by,
    }
    with database.transaction() as connection:
        connection.execute(statement, parameters)
        notify_on(database, connection, Wake.REQUEST)
    return request_id


def pending(database: Database, jobs: Collection[str], limit: int = 20) -> list[RequestRow]:
    """Requests no node took yet, oldest first, of the jobs given.

    The names are not sent (a node may know 10,000 jobs and asks every second);
    pending requests are few, and those of jobs this node does not know are left
    for a node that does.
    """
    statement = f"""
        SELECT {_COLUMNS} FROM {REQUESTS} WHERE taken_by IS NULL
        ORDER BY requested_at, id LIMIT :limit
    """
    known = set(jobs)
    with database.transaction() as connection:
        rows = [_request(row) for row in connection.execute(statement, {"limit": limit * 10})]
    return [row for row in rows if row.job in known][:limit]


def take(database: Database, request_id: str, node_id: str) -> bool:
    """Take the request for this node; False if another node was faster."""
    statement = f"""
        UPDATE {REQUESTS} SET taken_by = :node, taken_at = {database.now}
        WHERE id = :id AND taken_by IS NULL
    """
    with database.transaction() as connection:
        return connection.execute(statement, {"id": request_id, "node": node_id}).rowcount == 1


def finish(
    database: Database,
    request_id: str,
    node_id: str,
    *,
    outcome: RequestOutcome,
    detail: str,
    run_id: str | None = None,
) -> None:
    """Record how the request the node took went."""
    statement = f"""
        UPDATE {REQUESTS} SET outcome = :outcome, detail = :detail, run_id = :run_id,
            finished_at = {database.now}
        WHERE id = :id AND taken_by = :node
    """
    parameters = {
        "id": request_id,
        "node": node_id,
        "outcome": outcome.value,
        "detail": detail,
        "run_id": run_id,
    }
    with database.transaction() as connection:
        connection.execute(statement, parameters)


def get(database: Database, request_id: str) -> RequestRow | None:
    statement = f"SELECT {_COLUMNS} FROM {REQUESTS} WHERE id = :id"
    with database.transaction() as connection:
        row = connection.execute(statement, {"id": request_id}).first()
    return _request(row) if row else None


def recent(database: Database, job: str | None = None, limit: int = 20) -> list[RequestRow]:
    """The newest requests, of one job or of every job."""
    where = " WHERE job = :job" if job is not None else ""
    statement = f"""
        SELECT {_COLUMNS} FROM {REQUESTS}{where}
        ORDER BY requested_at DESC, id LIMIT :limit
    """
    with database.transaction() as connection:
        return [
            _request(row) for row in connection.execute(statement, {"job": job, "limit": limit})
        ]


def any_pending_on(connection: Connection) -> bool:
    """Whether some request waits for a node (inside a transaction of the caller's)."""
    return connection.execute(pending_query()).first() is not None


def pending_query() -> str:
    return f"SELECT id FROM {REQUESTS} WHERE taken_by IS NULL LIMIT 1"


def count_pending(database: Database) -> int:
    statement = f"SELECT count(*) FROM {REQUESTS} WHERE taken_by IS NULL"
    with database.transaction() as connection:
        return int(connection.execute(statement).scalar())
