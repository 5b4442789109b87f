"""Operator requests: what the console asked the fleet to run, and how it went.

A process that must not run jobs itself (the web console) writes a row; a live node
that knows the job takes it with a compare-and-set (on `tries`, which each take
raises) and a hold, `taken_until`. Every write of its carrying out is fenced on
(`taken_by`, `tries`) and renews the hold; a claim it makes is written in one
transaction with that fence and with its record on the request (`Fenced`), so a taker
that lost the request claims nothing, and a claim never lands without its record. A
taker that meets a fault gives the request back; one that died leaves its hold to
lapse; either way any node that knows the job takes it again.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from scheduler.model import Claim
from scheduler.store import job_sets
from scheduler.store.database import Connection, Database
from scheduler.store.faults import StoreRejectedError
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
    taken_until: datetime | None = None
    tries: int = 0
    progress: datetime | None = None


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


def _waiting(database: Database, alias: str = REQUESTS) -> str:
    """SQL: the request waits for a taker: never taken, given back, or its hold lapsed
    before it was finished."""
    return (
        f"({alias}.finished_at IS NULL AND ({alias}.taken_by IS NULL"
        f" OR {alias}.taken_until < {database.now}))"
    )


def pending(database: Database, job_set: str, limit: int = 20) -> list[RequestRow]:
    """Requests waiting for a taker, oldest first, of the jobs of the set `job_set`
    (selected by a join on it: no names sent, and other jobs' requests never crowd this
    node's own out)."""
    statement = f"""
        SELECT {_COLUMNS} FROM {REQUESTS} AS request
        WHERE {_waiting(database, "request")} AND {job_sets.member_of("request")}
        ORDER BY requested_at, id LIMIT :limit
    """
    with database.transaction() as connection:
        found = connection.execute(statement, {"job_set": job_set, "limit": limit})
        return [_request(row) for row in found]


class RequestLostError(StoreRejectedError):
    """The request is no longer this taker's (its hold lapsed and another node took it,
    or it was finished): nothing was written."""


@dataclass(frozen=True)
class Hold:
    """A request as the node that took it holds it: what its writes are fenced on."""

    request: RequestRow
    node: str
    hold_s: float

    def fence(self) -> tuple[str, dict[str, Any]]:
        """SQL: the request is still this take's, unfinished; and its parameters."""
        return (
            "id = :id AND taken_by = :node AND tries = :tries AND finished_at IS NULL",
            {"id": self.request.id, "node": self.node, "tries": self.request.tries},
        )


def take(database: Database, request: RequestRow, node_id: str, hold_s: float) -> Hold | None:
    """Take the request, as read, for this node; None if another node was faster. The
    row comes back as taken: a request given back meanwhile says how far it got."""
    until, parameters = database.after("hold_s", hold_s)
    statement = f"""
        UPDATE {REQUESTS} SET taken_by = :node, taken_at = {database.now},
            taken_until = {until}, tries = tries + 1
        WHERE id = :id AND tries = :seen_tries AND {_waiting(database)}
        RETURNING {_COLUMNS}
    """
    parameters |= {"id": request.id, "node": node_id, "seen_tries": request.tries}
    with database.transaction() as connection:
        row = connection.execute(statement, parameters).first()
    return Hold(_request(row), node_id, hold_s) if row is not None else None


def renew_on(database: Database, connection: Connection, hold: Hold) -> None:
    """Inside the caller's transaction: renew the hold, or raise `RequestLostError` (the
    transaction then writes nothing). On PostgreSQL the row stays locked to the end of
    the transaction: a node taking the request again waits for it, then finds it held."""
    fence, parameters = hold.fence()
    until, more = database.after("hold_s", hold.hold_s)
    statement = f"UPDATE {REQUESTS} SET taken_until = {until} WHERE {fence}"
    if connection.execute(statement, parameters | more).rowcount != 1:
        raise RequestLostError(f"request {hold.request.id} is no longer {hold.node}'s")


@dataclass(frozen=True)
class Record:
    """What a step of carrying a request out writes on its row: the outcome, or, with
    none, how far it got (a backfill's progress)."""

    detail: str
    outcome: RequestOutcome | None = None
    run_id: str | None = None
    progress: datetime | None = None


def record_on(database: Database, connection: Connection, hold: Hold, record: Record) -> bool:
    """Inside the caller's transaction: write the record, fenced; whether it landed."""
    fence, parameters = hold.fence()
    values = ["detail = :detail"]
    if record.run_id is not None:
        values.append("run_id = :run_id")
    if record.outcome is not None:
        values += ["outcome = :outcome", f"finished_at = {database.now}"]
    if record.progress is not None:
        values.append("progress = :progress")
    statement = f"UPDATE {REQUESTS} SET {', '.join(values)} WHERE {fence}"
    parameters |= {
        "detail": record.detail,
        "run_id": record.run_id,
        "outcome": record.outcome.value if record.outcome else None,
        "progress": record.progress,
    }
    return connection.execute(statement, parameters).rowcount == 1


@dataclass(frozen=True)
class Fenced:
    """A claim made for a request: made only while the request is still its taker's
    (`enter`, first in the claim's transaction), and recorded on the request in the
    same transaction (`leave`), so that both land or neither does."""

    hold: Hold
    # From what the claim won to what the request's row says of it (None: nothing).
    record: Callable[[Sequence[Claim]], Record | None]

    def enter(self, database: Database, connection: Connection) -> None:
        renew_on(database, connection, self.hold)

    def leave(self, database: Database, connection: Connection, won: Sequence[Claim]) -> None:
        record = self.record(won)
        if record is not None:
            record_on(database, connection, self.hold, record)


def finish(database: Database, hold: Hold, record: Record) -> bool:
    """Record how the request went (`record.outcome`), fenced: False if it is no longer
    this take's (another node took it again, or it was finished)."""
    assert record.outcome is not None, "a finish has an outcome"
    with database.transaction() as connection:
        return record_on(database, connection, hold, record)


def give_back(database: Database, hold: Hold, detail: str) -> bool:
    """Give the request back after a fault, saying how far it got, for any node that
    knows the job (this one too) to take it again; False if it was no longer ours."""
    fence, parameters = hold.fence()
    statement = f"""
        UPDATE {REQUESTS} SET taken_by = NULL, taken_until = NULL, detail = :detail
        WHERE {fence}
    """
    with database.transaction() as connection:
        return connection.execute(statement, parameters | {"detail": detail}).rowcount == 1


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


def pending_query(database: Database) -> str:
    """SQL: a request of the node's own jobs waits for a taker (the heartbeat's read;
    `:own_id` names the node)."""
    return f"""SELECT request.id FROM {REQUESTS} AS request
        WHERE {_waiting(database, "request")}
          AND {job_sets.member_of("request", job_sets.own_digest())} LIMIT 1"""


def count_pending(database: Database) -> int:
    """How many requests of any job wait for a taker."""
    statement = f"SELECT count(*) FROM {REQUESTS} WHERE {_waiting(database)}"
    with database.transaction() as connection:
        return int(connection.execute(statement).scalar())
