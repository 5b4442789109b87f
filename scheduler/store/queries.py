"""Read-only questions the operator commands ask: views, `check`, readiness and metrics.

Nothing here writes. Columns are named one by one, so a column added to a table
for another purpose does not change what these answers carry.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from scheduler.errors import UserError
from scheduler.states import RunStatus
from scheduler.store.connection import in_list, pairs_in
from scheduler.store.database import Database
from scheduler.store.fence import ACTIVE, RUNS
from scheduler.store.nodes import NODES
from scheduler.store.takeover import ATTEMPTS


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
_RUN_COLUMNS = ", ".join(RunRow.__dataclass_fields__)
_ATTEMPT_COLUMNS = ", ".join(AttemptRow.__dataclass_fields__)
_NODE_COLUMNS = ", ".join(NodeRow.__dataclass_fields__)


def _run(row: Any) -> RunRow:
    return RunRow(**row._asdict())


def _runs(
    database: Database, where: str, parameters: dict[str, Any], tail: str = ""
) -> list[RunRow]:
    """Runs that meet `where`, then `tail` (an ORDER BY, a LIMIT)."""
    statement = f"SELECT {_RUN_COLUMNS} FROM {RUNS} WHERE {where} {tail}"
    with database.transaction() as connection:
        return [_run(row) for row in connection.execute(statement, parameters)]


def clock(database: Database) -> datetime:
    """Now by the database clock, which leases and heartbeats are written with."""
    with database.transaction() as connection:
        moment = connection.execute(f"SELECT {database.now} AS now").scalar()
    assert isinstance(moment, datetime)
    return moment


def probe(database: Database) -> None:
    """Prove the database answers (`SELECT 1`); raise if it does not.

    A SQLite file deleted or renamed under a running node still answers through the
    open handle, but nothing written there is seen by anyone: count it as gone.
    """
    path = database.url.path
    if not database.server_clock and path and not Path(path).exists():
        raise UserError(f"database file {path!r} no longer exists")
    database.ping()


def latest_runs(database: Database) -> dict[str, RunRow]:
    """Each job's run with the newest period."""
    newest = f"SELECT job, max(period) AS period FROM {RUNS} GROUP BY job"
    columns = ", ".join(f"run.{name}" for name in RunRow.__dataclass_fields__)
    statement = f"""
        SELECT {columns} FROM {RUNS} AS run
        JOIN ({newest}) AS newest ON run.job = newest.job AND run.period = newest.period
    """
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
    conditions = ["TRUE"]
    parameters: dict[str, Any] = {"limit": limit, "since": since}
    if jobs:
        listed, named = in_list("job", list(jobs))
        conditions.append(f"job IN ({listed})")
        parameters |= named
    if statuses:
        wanted, named = status_filter(statuses)
        conditions.append(wanted)
        parameters |= named
    if since is not None:
        conditions.append("period >= :since")
    return _runs(
        database, " AND ".join(conditions), parameters, "ORDER BY period DESC, job LIMIT :limit"
    )


def run_at(database: Database, job: str, period: datetime) -> RunRow | None:
    found = _runs(database, "job = :job AND period = :period", {"job": job, "period": period})
    return found[0] if found else None


def runs_within(database: Database, job: str, start: datetime, end: datetime) -> list[RunRow]:
    """A job's runs with `start <= period < end`, oldest first."""
    return _runs(
        database,
        "job = :job AND period >= :start AND period < :end",
        {"job": job, "start": start, "end": end},
        "ORDER BY period",
    )


def has_runs(database: Database, job: str) -> bool:
    """Whether any run carries this job name (one row, through the primary key)."""
    statement = f"SELECT 1 FROM {RUNS} WHERE job = :job LIMIT 1"
    with database.transaction() as connection:
        return connection.execute(statement, {"job": job}).first() is not None


def run_by_id(database: Database, run_id: str) -> RunRow | None:
    """The run a log line's `run_id` names."""
    found = _runs(database, "id = :id", {"id": run_id})
    return found[0] if found else None


def runs_by_ids(database: Database, ids: Collection[str]) -> dict[str, RunRow]:
    """The runs of these ids (a page of requests' runs), by id."""
    if not ids:
        return {}
    listed, parameters = in_list("id", sorted(ids))
    return {row.id: row for row in _runs(database, f"id IN ({listed})", parameters)}


def runs_by_id_prefix(database: Database, prefix: str, limit: int = 2) -> list[RunRow]:
    """Runs whose id begins with `prefix` (the first characters a terminal's log line
    shows), at most `limit`. Ids are lowercase hex: the range after the prefix ends
    before `g`, and the primary key's index serves it."""
    return _runs(
        database,
        "id >= :low AND id < :high",
        {"low": prefix, "high": f"{prefix}g"},
        f"ORDER BY id LIMIT {int(limit)}",
    )


def runs_at(database: Database, periods: Mapping[str, datetime]) -> dict[str, RunRow]:
    """The run of each job at the period given for it, where one exists."""
    found: dict[str, RunRow] = {}
    pairs = list(periods.items())
    with database.transaction() as connection:
        # Row-value IN lists, a chunk at a time: PostgreSQL refuses one IN list of
        # 10,000 rows.
        for start in range(0, len(pairs), PAIRS_PER_STATEMENT):
            listed, parameters = pairs_in("run", pairs[start : start + PAIRS_PER_STATEMENT])
            statement = f"SELECT {_RUN_COLUMNS} FROM {RUNS} WHERE (job, period) IN ({listed})"
            found.update((row.job, _run(row)) for row in connection.execute(statement, parameters))
    return found


def attempts_of(database: Database, run_id: str) -> list[AttemptRow]:
    """The attempts recorded for a run, oldest first (the current one may be missing)."""
    statement = f"SELECT {_ATTEMPT_COLUMNS} FROM {ATTEMPTS} WHERE run_id = :run_id ORDER BY attempt"
    with database.transaction() as connection:
        rows = connection.execute(statement, {"run_id": run_id})
        return [AttemptRow(**row._asdict()) for row in rows]


def last_successes(database: Database) -> dict[str, Success]:
    """For each registered job that ever succeeded: its newest succeeded period and
    finish time. Read job by job through the runs' primary key, so the cost is the
    code-declared jobs' history, never the runs of a million schedules (each its own
    `@key`, not registered: `check` watches those by their schedules' rows)."""
    succeeded = f"FROM {RUNS} AS run WHERE run.job = job.name AND run.ended_status = 'succeeded'"
    statement = f"""
        SELECT job.name AS job, (SELECT max(run.period) {succeeded}) AS period,
               (SELECT max(run.finished_at) {succeeded}) AS finished_at
        FROM scheduler_jobs AS job
    """
    with database.transaction() as connection:
        return {
            row.job: Success(row.period, row.finished_at)
            for row in connection.execute(statement)
            if row.period is not None
        }


def status_filter(statuses: Collection[str]) -> tuple[str, dict[str, Any]]:
    """Runs in these statuses, as a condition an index serves, and its parameters.

    No index holds `status` (a start would then touch it: migration 0011). A run in
    hand (claimed, queued, running) is found among the live rows, any other by
    `ended_status`, which is its status once it is no longer in hand.
    """
    in_hand = [status for status in statuses if status in ACTIVE]
    ended = [status for status in statuses if status not in ACTIVE]
    conditions = []
    parameters: dict[str, Any] = {}
    if in_hand:
        listed, named = in_list("in_hand", in_hand)
        conditions.append(f"(live AND status IN ({listed}))")
        parameters |= named
    if ended:
        listed, named = in_list("ended", ended)
        conditions.append(f"ended_status IN ({listed})")
        parameters |= named
    if not conditions:
        return "FALSE", {}
    return f"({' OR '.join(conditions)})", parameters


def recorded_since(database: Database, statuses: Collection[str], since: datetime) -> list[RunRow]:
    """Runs in the given statuses whose outcome was recorded at or after `since`.

    "Recorded" is when the run finished, or when its row was written for a run that
    never started (a missed period): a period missed long ago is news when recorded.
    """
    wanted, parameters = status_filter(statuses)
    return _runs(
        database,
        f"{wanted} AND coalesce(finished_at, claimed_at) >= :since",
        {**parameters, "since": since},
        "ORDER BY job, period",
    )


def lingering(database: Database) -> list[RunRow]:
    """Runs that timed out with their function still running in its thread: `timed_out`
    rows whose lease is still held (the holder keeps it until the function returns, and
    the job's later periods are skipped meanwhile), oldest period first, however old. A
    lease that ran out is a dead holder's, not a lingering run."""
    return _runs(
        database,
        f"live AND status = 'timed_out' AND lease_expires_at > {database.now}",
        {},
        "ORDER BY period, job",
    )


def count_by_job(
    database: Database, statuses: Collection[str], *, recorded_since: datetime | None = None
) -> dict[str, int]:
    """How many runs each job has in the given statuses (recorded at or after
    `recorded_since`, as `recorded_since` reads "recorded"); jobs with none are left out."""
    wanted, parameters = status_filter(statuses)
    recent = ""
    if recorded_since is not None:
        recent = " AND coalesce(finished_at, claimed_at) >= :since"
        parameters["since"] = recorded_since
    statement = f"SELECT job, count(*) AS runs FROM {RUNS} WHERE {wanted}{recent} GROUP BY job"
    with database.transaction() as connection:
        return {row.job: int(row.runs) for row in connection.execute(statement, parameters)}


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
    conditions = ["TRUE"]
    if seen_since is not None:
        conditions.append("heartbeat_at >= :seen_since")
    if started_since is not None:
        conditions.append("started_at >= :started_since")
    if kind is not None:
        conditions.append("jobs_digest = :kind")
    statement = f"""
        SELECT {_NODE_COLUMNS} FROM {NODES} WHERE {" AND ".join(conditions)}
        ORDER BY started_at DESC, id
    """
    parameters = {"seen_since": seen_since, "started_since": started_since, "kind": kind}
    with database.transaction() as connection:
        return [NodeRow(**row._asdict()) for row in connection.execute(statement, parameters)]


def holder_of(
    database: Database, job: str, period: datetime
) -> tuple[str | None, RunStatus] | None:
    """Who holds a period and in which state, for a loser's log line."""
    statement = f"SELECT holder, status FROM {RUNS} WHERE job = :job AND period = :period"
    with database.transaction() as connection:
        row = connection.execute(statement, {"job": job, "period": period}).first()
    return None if row is None else (row.holder, RunStatus(row.status))


def run_mapping(database: Database, job: str, period: datetime) -> dict[str, object] | None:
    """One run as a plain mapping, for the CLI and tests."""
    statement = f"SELECT * FROM {RUNS} WHERE job = :job AND period = :period"
    with database.transaction() as connection:
        row = connection.execute(statement, {"job": job, "period": period}).first()
    return row._asdict() if row else None
