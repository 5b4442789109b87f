"""Read-only questions the operator commands ask: views, `check`, readiness and metrics.

Nothing here writes. Columns are named one by one, so a column added to a table
for another purpose does not change what these answers carry.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import ColumnElement, Row, and_, func, select, tuple_

from scheduler.errors import UserError
from scheduler.states import RunStatus
from scheduler.store.database import Database
from scheduler.store.schema import attempts, nodes, runs


@dataclass(frozen=True)
class RunRow:
    """One run as the current row of `scheduler_runs` has it (its latest attempt)."""

    id: str
    job: str
    period: datetime
    status: str
    reason: str | None
    origin: str
    attempt: int
    holder: str | None
    claimed_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    duration_ms: int | None
    lease_expires_at: datetime | None
    retry_at: datetime | None
    error_type: str | None
    error_message: str | None
    error_traceback: str | None


@dataclass(frozen=True)
class AttemptRow:
    """One earlier (or the current) attempt of a run, from `scheduler_attempts`."""

    attempt: int
    node: str | None
    status: str
    reason: str | None
    started_at: datetime | None
    finished_at: datetime | None
    duration_ms: int | None
    error_type: str | None
    error_message: str | None
    error_traceback: str | None


@dataclass(frozen=True)
class NodeRow:
    id: str
    name: str
    host: str
    pid: int
    version: str
    started_at: datetime
    heartbeat_at: datetime
    stopped_at: datetime | None
    # "one-shot" for run-once, trigger, rerun and backfill (see scheduler/node/peers.py).
    jobs_digest: str | None = None


@dataclass(frozen=True)
class Success:
    """A job's newest succeeded period and the newest instant one of its runs succeeded."""

    period: datetime
    finished_at: datetime | None


# (job, period) pairs asked for in one statement.
PAIRS_PER_STATEMENT = 1000
_RUN_COLUMNS = [runs.c[name] for name in RunRow.__dataclass_fields__]
_ATTEMPT_COLUMNS = [attempts.c[name] for name in AttemptRow.__dataclass_fields__]
_NODE_COLUMNS = [nodes.c[name] for name in NodeRow.__dataclass_fields__]


def _run(row: Row[tuple[object, ...]]) -> RunRow:
    return RunRow(**row._mapping)


def clock(database: Database) -> datetime:
    """Now by the database clock, which leases and heartbeats are written with."""
    with database.transaction() as connection:
        moment = connection.execute(select(database.now())).scalar_one()
    assert isinstance(moment, datetime)
    return moment


def probe(database: Database) -> None:
    """Prove the database answers (`SELECT 1`); raise if it does not.

    A SQLite file deleted or renamed under a running node still answers through the
    open handle, but nothing written there is seen by anyone: count it as gone.
    """
    path = database.engine.url.database
    if not database.server_clock and path and not Path(path).exists():
        raise UserError(f"database file {path!r} no longer exists")
    database.ping()


def latest_runs(database: Database) -> dict[str, RunRow]:
    """Each job's run with the newest period."""
    newest = (
        select(runs.c.job, func.max(runs.c.period).label("period")).group_by(runs.c.job).subquery()
    )
    statement = select(*_RUN_COLUMNS).join(
        newest, and_(runs.c.job == newest.c.job, runs.c.period == newest.c.period)
    )
    with database.transaction() as connection:
        return {row.job: _run(row) for row in connection.execute(statement)}


def list_runs(
    database: Database,
    *,
    jobs: Collection[str] = (),
    statuses: Collection[str] = (),
    since: datetime | None = None,
    limit: int = 50,
) -> list[RunRow]:
    """Runs, newest period first, filtered by job, status and earliest period."""
    statement = select(*_RUN_COLUMNS).order_by(runs.c.period.desc(), runs.c.job).limit(limit)
    if jobs:
        statement = statement.where(runs.c.job.in_(list(jobs)))
    if statuses:
        statement = statement.where(runs.c.status.in_(list(statuses)))
    if since is not None:
        statement = statement.where(runs.c.period >= since)
    with database.transaction() as connection:
        return [_run(row) for row in connection.execute(statement)]


def run_at(database: Database, job: str, period: datetime) -> RunRow | None:
    statement = select(*_RUN_COLUMNS).where(runs.c.job == job, runs.c.period == period)
    with database.transaction() as connection:
        row = connection.execute(statement).first()
    return _run(row) if row else None


def runs_within(database: Database, job: str, start: datetime, end: datetime) -> list[RunRow]:
    """A job's runs with `start <= period < end`, oldest first."""
    statement = (
        select(*_RUN_COLUMNS)
        .where(runs.c.job == job, runs.c.period >= start, runs.c.period < end)
        .order_by(runs.c.period)
    )
    with database.transaction() as connection:
        return [_run(row) for row in connection.execute(statement)]


def run_by_id(database: Database, run_id: str) -> RunRow | None:
    """The run a log line's `run_id` names."""
    statement = select(*_RUN_COLUMNS).where(runs.c.id == run_id)
    with database.transaction() as connection:
        row = connection.execute(statement).first()
    return _run(row) if row else None


def runs_at(database: Database, periods: Mapping[str, datetime]) -> dict[str, RunRow]:
    """The run of each job at the period given for it, where one exists."""
    found: dict[str, RunRow] = {}
    pairs = list(periods.items())
    with database.transaction() as connection:
        # Row-value IN lists, a chunk at a time: an OR of 10,000 pairs took longer to
        # build than to run, and PostgreSQL refuses one IN list of 10,000 rows.
        for start in range(0, len(pairs), PAIRS_PER_STATEMENT):
            chunk = pairs[start : start + PAIRS_PER_STATEMENT]
            statement = select(*_RUN_COLUMNS).where(tuple_(runs.c.job, runs.c.period).in_(chunk))
            found.update((row.job, _run(row)) for row in connection.execute(statement))
    return found


def attempts_of(database: Database, run_id: str) -> list[AttemptRow]:
    """The attempts recorded for a run, oldest first (the current one may be missing)."""
    statement = (
        select(*_ATTEMPT_COLUMNS).where(attempts.c.run_id == run_id).order_by(attempts.c.attempt)
    )
    with database.transaction() as connection:
        return [AttemptRow(**row._mapping) for row in connection.execute(statement)]


def last_successes(database: Database) -> dict[str, Success]:
    """For each job that ever succeeded: its newest succeeded period and finish time."""
    statement = (
        select(
            runs.c.job,
            func.max(runs.c.period).label("period"),
            func.max(runs.c.finished_at).label("finished_at"),
        )
        .where(runs.c.status == "succeeded")
        .group_by(runs.c.job)
    )
    with database.transaction() as connection:
        return {
            row.job: Success(row.period, row.finished_at) for row in connection.execute(statement)
        }


def recorded_since(database: Database, statuses: Collection[str], since: datetime) -> list[RunRow]:
    """Runs in the given statuses whose outcome was recorded at or after `since`.

    "Recorded" is when the run finished, or when its row was written for a run that
    never started (a missed period): a period missed long ago is news when recorded.
    """
    recorded: ColumnElement[datetime] = func.coalesce(runs.c.finished_at, runs.c.claimed_at)
    statement = (
        select(*_RUN_COLUMNS)
        .where(runs.c.status.in_(list(statuses)), recorded >= since)
        .order_by(runs.c.job, runs.c.period)
    )
    with database.transaction() as connection:
        return [_run(row) for row in connection.execute(statement)]


def count_by_job(
    database: Database, statuses: Collection[str], *, recorded_since: datetime | None = None
) -> dict[str, int]:
    """How many runs each job has in the given statuses (recorded at or after
    `recorded_since`, as `recorded_since` reads "recorded"); jobs with none are left out."""
    statement = (
        select(runs.c.job, func.count().label("runs"))
        .where(runs.c.status.in_(list(statuses)))
        .group_by(runs.c.job)
    )
    if recorded_since is not None:
        recorded = func.coalesce(runs.c.finished_at, runs.c.claimed_at)
        statement = statement.where(recorded >= recorded_since)
    with database.transaction() as connection:
        return {row.job: int(row.runs) for row in connection.execute(statement)}


def list_nodes(
    database: Database,
    *,
    seen_since: datetime | None = None,
    started_since: datetime | None = None,
    kind: str | None = None,
) -> list[NodeRow]:
    """Nodes, newest start first; with `seen_since`, only those heard from since then,
    with `started_since` only those started since, with `kind` only those of that
    jobs digest (`one-shot`)."""
    statement = select(*_NODE_COLUMNS).order_by(nodes.c.started_at.desc(), nodes.c.id)
    if seen_since is not None:
        statement = statement.where(nodes.c.heartbeat_at >= seen_since)
    if started_since is not None:
        statement = statement.where(nodes.c.started_at >= started_since)
    if kind is not None:
        statement = statement.where(nodes.c.jobs_digest == kind)
    with database.transaction() as connection:
        return [NodeRow(**row._mapping) for row in connection.execute(statement)]


def holder_of(
    database: Database, job: str, period: datetime
) -> tuple[str | None, RunStatus] | None:
    """Who holds a period and in which state, for a loser's log line."""
    with database.transaction() as connection:
        row = connection.execute(
            select(runs.c.holder, runs.c.status).where(runs.c.job == job, runs.c.period == period)
        ).first()
    return None if row is None else (row.holder, RunStatus(row.status))


def run_mapping(database: Database, job: str, period: datetime) -> dict[str, object] | None:
    """One run as a plain mapping, for the CLI and tests."""
    with database.transaction() as connection:
        row = connection.execute(
            select(runs).where(runs.c.job == job, runs.c.period == period)
        ).first()
    return dict(row._mapping) if row else None
