"""The fenced writes of a held run: start, finish, release (renewal: `store.renewals`).

Each row is fenced on its own (see `store.fence`), so one refused row does not refuse
the others of a batch. Every write is also idempotent for its own holder: a write whose
commit succeeded but whose reply was lost finds, when it is tried again, that it
already happened (a start finds the run running under its fence, an outcome finds
itself written). A start also needs a live lease, renews it, and counts the start.

Two forms: with `Database.arrays` each kind of write is one statement whatever the
batch size, sent in autocommit (one round trip); otherwise a statement a row inside
one transaction (SQLite is local and has one writer).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

from scheduler.model import Claim, Failure, Finish, Started, StartRequest
from scheduler.states import Reason, RunStatus
from scheduler.store import events as alert_events
from scheduler.store import streak_pause, streaks
from scheduler.store.connection import in_list
from scheduler.store.database import Connection, Database
from scheduler.store.events import EVENTS
from scheduler.store.fence import (
    ACTIVE_SQL,
    FENCED_SQL,
    MINE_SQL,
    RUNS,
    fence_arrays,
    fence_of,
    fence_params,
)
from scheduler.store.wakeups import RETRY_NOTIFY_SQL, Wake, alert_notify_sql, notify_on


def start(database: Database, claim: Claim, *, in_turn: bool = False) -> Started:
    """Mark one run as running if it is still ours (see `record`)."""
    _, (started,) = record(database, [], [StartRequest(claim, in_turn)])
    return started


def finish(
    database: Database,
    claim: Claim,
    status: RunStatus,
    duration_ms: int | None,
    *,
    failure: Failure | None = None,
    reason: Reason | None = None,
    retry_in: float | None = None,
) -> bool:
    """Record one outcome if we still hold the run; False means it was refused."""
    (applied,), _ = record(
        database, [Finish(claim, status, duration_ms, failure, reason, retry_in)], []
    )
    return applied


def began(database: Database, claims: Sequence[Claim]) -> None:
    """Say that these runs' bodies have begun (see `record`)."""
    record(database, [], [], began=claims)


def record(
    database: Database,
    outcomes: Sequence[Finish],
    starts: Sequence[StartRequest],
    *,
    began: Sequence[Claim] = (),
) -> tuple[list[bool], list[Started]]:
    """Write that bodies began, then many outcomes, then many starts; each row fenced on
    (id, attempt, holder) on its own, so one refused row does not refuse the others.

    `began`: runs whose function has been called. Written by the holder after the call,
    never with the start: only then may a period of the job skip behind the run (see
    `store.fence`). A run no longer running under its fence is left as it is.

    Outcomes go first so that a queued period may start right after the period it
    waited for ends. A start also needs a live lease, leaves it as it is (the
    heartbeat renews it), and is idempotent: a run already running under the same
    fence (this very start, whose reply was lost) counts as started. A start that must
    wait its turn (`in_turn`) takes its job's advisory lock first, so that no period of
    the job is inserted or started unseen meanwhile; without such starts, PostgreSQL
    takes each kind in one statement in autocommit (one round trip each). SQLite, local
    and single-writer, takes a statement a row inside one transaction.
    """
    in_turn = {request.claim.job for request in starts if request.in_turn}
    # A final failure's streak is read and acted on under its job's lock, in one
    # transaction: two nodes' failures of one job cannot both miss, or both make, the
    # failure that reaches a threshold.
    failing = {outcome.claim.job for outcome in outcomes if outcome.final_failure}
    if database.arrays:
        # The rows are not locked in any order: the process's renewals wait (`batch_gate`).
        with database.batch_gate.batch():
            return _record_postgres(
                database, outcomes, starts, began=began, in_turn=in_turn, failing=failing
            )
    with database.transaction() as connection:
        for claim in began:
            connection.execute(
                f"UPDATE {RUNS} SET began_at = {database.now}"
                f" WHERE {MINE_SQL} AND status IN ({_BEGUN_SQL}) AND began_at IS NULL",
                fence_params(claim),
            )
        # Oldest period first, so that each outcome's streak sees the ones before it.
        order = sorted(range(len(outcomes)), key=lambda i: outcomes[i].claim.period)
        written = {i: _finish_one(database, connection, outcomes[i]) for i in order}
        applied = [written[i] for i in range(len(outcomes))]
        started = [_start_one(database, connection, request) for request in starts]
    return applied, started


def earlier_active(now: str) -> str:
    """Another period of the job runs (or lingers), or an earlier one waits, under a
    live lease (`startable_params` give the run; `now` is the clock's SQL)."""
    return f"""EXISTS (
        SELECT 1 FROM {RUNS} AS other
        WHERE other.job = :fence_job AND other.live AND other.id <> :fence_id
          AND other.lease_expires_at > {now}
          AND (other.status IN ('queued', 'running', 'timed_out')
               OR (other.status = 'claimed' AND other.period < :fence_period)))"""


def startable(database: Database, *, in_turn: bool) -> str:
    """A claimed run its holder may set going now (start it here, or queue it for a
    worker): its fence, not started yet, its lease live, and, in turn, no earlier period
    of its job active. Parameters: `startable_params`."""
    conditions = [MINE_SQL, "status = 'claimed'", f"lease_expires_at > {database.now}"]
    if in_turn:
        conditions.append(f"NOT {earlier_active(database.now)}")
    return " AND ".join(conditions)


def startable_params(claim: Claim) -> dict[str, Any]:
    return {**fence_params(claim), "fence_job": claim.job, "fence_period": claim.period}


def _start_one(database: Database, connection: Connection, request: StartRequest) -> Started:
    claim = request.claim
    # Already running under this fence: this start, tried again after a lost reply.
    again = connection.execute(
        f"SELECT 1 FROM {RUNS} WHERE {MINE_SQL} AND status = 'running'"
        f" AND lease_expires_at > {database.now}",
        fence_params(claim),
    ).first()
    if again is not None:
        return Started.STARTED
    statement = f"""
        UPDATE {RUNS} SET status = 'running', started_at = {database.now},
            started_attempts = started_attempts + 1
        WHERE {startable(database, in_turn=request.in_turn)}
    """
    if connection.execute(statement, startable_params(claim)).rowcount == 1:
        return Started.STARTED
    if request.in_turn:
        waiting = connection.execute(
            f"SELECT id FROM {RUNS} WHERE {MINE_SQL} AND status = 'claimed'",
            fence_params(claim),
        ).first()
        if waiting:
            return Started.WAIT
    return Started.LOST


def _finish_one(database: Database, connection: Connection, outcome: Finish) -> bool:
    failure = outcome.failure
    parameters: dict[str, Any] = {
        **fence_params(outcome.claim),
        "status": outcome.status.value,
        "reason": outcome.reason.value if outcome.reason else None,
        "duration_ms": outcome.duration_ms,
        "error_type": failure.type if failure else None,
        "error_message": failure.message if failure else None,
        "error_traceback": failure.traceback if failure else None,
    }
    lease = retry = "NULL"
    if outcome.lingering:
        lease, leased = database.lease("lease_s", outcome.claim.lease_seconds)
        parameters |= leased
    if outcome.retry_in is not None:
        retry, later = database.after("retry_in", outcome.retry_in)
        parameters |= later
    waiting_only = " AND status = 'claimed'" if outcome.waiting_only else ""
    statement = f"""
        UPDATE {RUNS} SET status = :status, reason = :reason, finished_at = {database.now},
            duration_ms = :duration_ms, lease_expires_at = {lease}, retry_at = {retry},
            error_type = :error_type, error_message = :error_message,
            error_traceback = :error_traceback
        WHERE {FENCED_SQL}{waiting_only}
    """
    if connection.execute(statement, parameters).rowcount == 1:
        streak = alert_events.finished(database, connection, outcome)
        _pause_if_due(database, connection, outcome, streak)
        return True
    return _already_written(connection, [outcome]) == [True]


def _pause_if_due(
    database: Database, connection: Connection, outcome: Finish, streak: int | None
) -> None:
    """The final failure that makes exactly `pause_after` in a row pauses its job (an
    operator who resumed it mid-streak is not overruled by the failures after)."""
    due = streak is not None and streak == outcome.pause_after
    if due and streak_pause.pause_for(database, connection, outcome, streak or 0):
        alert_events.paused(database, connection, outcome, streak or 0)


def _already_written(connection: Connection, outcomes: Sequence[Finish]) -> list[bool]:
    """For refused outcomes: which of them the row already shows, under the same fence
    (an earlier try of this very write, whose reply was lost)."""
    ids, parameters = in_list("id", [outcome.claim.id for outcome in outcomes])
    rows = {
        row.id: row
        for row in connection.execute(
            f"SELECT id, attempt, holder, status FROM {RUNS} WHERE id IN ({ids})",
            parameters,
        )
    }
    answers = []
    for outcome in outcomes:
        row = rows.get(outcome.claim.id)
        answers.append(
            row is not None
            and (row.attempt, row.holder) == (outcome.claim.attempt, outcome.claim.holder)
            and row.status == outcome.status.value
        )
    return answers


def _record_postgres(
    database: Database,
    outcomes: Sequence[Finish],
    starts: Sequence[StartRequest],
    *,
    began: Sequence[Claim],
    in_turn: set[str],
    failing: set[str],
) -> tuple[list[bool], list[Started]]:
    if in_turn and not outcomes and not began:
        # A start batch (the starter's): the whole guarded transaction in one round trip.
        return [], _start_pipelined(database, starts, in_turn)
    if not in_turn and not failing:
        with database.autocommit() as connection:
            _began_postgres(connection, began)
            applied = _finish_postgres(database, connection, outcomes)
            return applied, _start_postgres(connection, starts)
    with database.guarded(jobs=in_turn | failing) as guarded:
        _began_postgres(guarded.connection, began)
        applied = _finish_postgres(database, guarded.connection, outcomes)
        return applied, _start_postgres(guarded.connection, starts)


# The batches below find their rows by `id`. Their status test is written `(…) IS TRUE`,
# which means the same but no index can serve: right after a burst the statistics are
# stale (a few claimed rows expected, 10,000 there), and the planner once took an index
# on `status` instead, reading every claimed row for each batch of 16.
# A row already running under the same fence is this start, tried again: it keeps its
# started_at and start count. A start changes no indexed column (it leaves the lease as
# the claim or the last renewal set it, and no index holds `status` since migration
# 0011), so on PostgreSQL it is a HOT update.
_START_POSTGRES = f"""
    UPDATE {RUNS} AS run SET status = 'running',
        started_at = CASE WHEN run.status = 'claimed' THEN statement_timestamp()
                          ELSE run.started_at END,
        started_attempts = run.started_attempts
                           + CASE WHEN run.status = 'claimed' THEN 1 ELSE 0 END
    FROM unnest(CAST(:ids AS TEXT[]), CAST(:attempts AS INT[]),
                CAST(:holders AS TEXT[]), CAST(:in_turn AS BOOLEAN[]))
         AS wanted(id, attempt, holder, in_turn)
    WHERE run.id = ANY(CAST(:ids AS TEXT[])) AND run.id = wanted.id
      AND run.attempt = wanted.attempt AND run.holder = wanted.holder
      AND (run.status IN ('claimed', 'running')) IS TRUE
      AND run.lease_expires_at > statement_timestamp()
      AND (run.status = 'running' OR NOT (wanted.in_turn AND EXISTS (
          SELECT FROM {RUNS} AS other
          WHERE other.job = run.job AND other.live AND other.id <> run.id
            AND other.lease_expires_at > statement_timestamp()
            AND (other.status IN ('queued', 'running', 'timed_out')
                 OR (other.status = 'claimed' AND other.period < run.period)))))
    RETURNING run.id, run.attempt, run.holder
"""

_STILL_WAITING_POSTGRES = f"""
    SELECT run.id, run.attempt, run.holder FROM {RUNS} AS run
    JOIN unnest(CAST(:ids AS TEXT[]), CAST(:attempts AS INT[]), CAST(:holders AS TEXT[]))
         AS wanted(id, attempt, holder)
      ON run.id = wanted.id AND run.attempt = wanted.attempt AND run.holder = wanted.holder
    WHERE run.id = ANY(CAST(:ids AS TEXT[])) AND (run.status = 'claimed') IS TRUE
"""


# The statuses of a run whose body may still be in its function.
_BEGUN_SQL = "'running', 'timed_out'"
_BEGAN_POSTGRES = f"""
    UPDATE {RUNS} AS run SET began_at = statement_timestamp()
    FROM unnest(CAST(:ids AS TEXT[]), CAST(:attempts AS INT[]),
                CAST(:holders AS TEXT[])) AS mine(id, attempt, holder)
    WHERE run.id = ANY(CAST(:ids AS TEXT[])) AND run.id = mine.id
      AND run.attempt = mine.attempt AND run.holder = mine.holder
      AND (run.status IN ({_BEGUN_SQL})) IS TRUE AND run.began_at IS NULL
"""


def _began_postgres(connection: Connection, claims: Sequence[Claim]) -> None:
    if claims:
        connection.execute(_BEGAN_POSTGRES, fence_arrays(claims))


def _start_postgres(connection: Connection, requests: Sequence[StartRequest]) -> list[Started]:
    if not requests:
        return []
    started = _fences(connection.execute(_START_POSTGRES, _start_parameters(requests)))
    return _start_answers(requests, started, _held(connection, _unstarted(requests, started)))


def _start_pipelined(
    database: Database, requests: Sequence[StartRequest], jobs: Collection[str]
) -> list[Started]:
    """`_start_postgres` in a guarded transaction of its own, sent in one round trip;
    runs in turn that did not start are read again after it (WAIT if still claimed
    under their fence)."""
    (rows,) = database.guarded_batch([(_START_POSTGRES, _start_parameters(requests))], jobs=jobs)
    started = _fences(rows)
    held: set[tuple[str, int, str]] = set()
    if waiting := _unstarted(requests, started):
        with database.autocommit() as connection:
            held = _held(connection, waiting)
    return _start_answers(requests, started, held)


def _start_parameters(requests: Sequence[StartRequest]) -> dict[str, Any]:
    claims = [request.claim for request in requests]
    return {**fence_arrays(claims), "in_turn": [r.in_turn for r in requests]}


def _fences(rows: Iterable[Any]) -> set[tuple[str, int, str]]:
    return {(row[0], row[1], row[2]) for row in rows}


def _unstarted(requests: Sequence[StartRequest], started: set[tuple[str, int, str]]) -> list[Claim]:
    """The runs in turn that did not start: not their turn yet, or lost."""
    return [r.claim for r in requests if r.in_turn and fence_of(r.claim) not in started]


def _held(connection: Connection, claims: Sequence[Claim]) -> set[tuple[str, int, str]]:
    """Of these runs, those still claimed under their fence."""
    if not claims:
        return set()
    return _fences(connection.execute(_STILL_WAITING_POSTGRES, fence_arrays(claims)))


def _start_answers(
    requests: Sequence[StartRequest],
    started: set[tuple[str, int, str]],
    held: set[tuple[str, int, str]],
) -> list[Started]:
    """STARTED for the fences the start returned; of the others, WAIT for a run in turn
    still claimed under its fence, LOST for the rest."""
    return [
        Started.STARTED
        if fence_of(request.claim) in started
        else Started.WAIT
        if fence_of(request.claim) in held
        else Started.LOST
        for request in requests
    ]


# The outcome's events travel with it (candidates as arrays): the statement keeps those
# of the rows it wrote, so an event lands exactly when its outcome does. Whether a
# `failed` of the job is unrecovered (its newest `failed` or `recovered` event before
# this period is a `failed` one) is looked up among the job's events, which are few:
# `recovered` is kept only then, and `failed` only otherwise, when its streak (read
# from the runs, `store.streaks`, for final failures only) reaches the job's
# `alert_after_failures`. The statement answers each final failure's streak.
_OPEN_ALERT_SQL = f"""(
        SELECT before.kind = 'failed' FROM {EVENTS} AS before
        WHERE before.job = done.job AND before.period < done.period
          AND before.kind IN ('failed', 'recovered')
        ORDER BY before.period DESC, before.kind LIMIT 1)"""
_RECOVERED_STREAK_SQL = streaks.before_sql("done.job", "done.period", str(streaks.RECOVERED_CAP))
_BORN_SQL = "(SELECT FROM born UNION ALL SELECT FROM failed_born) AS news"
_FINISH_POSTGRES = f"""
    WITH done AS (
    UPDATE {RUNS} AS run
    SET status = done.status, reason = done.reason, finished_at = statement_timestamp(),
        duration_ms = done.duration_ms,
        lease_expires_at = CASE WHEN done.lingering
            THEN clock_timestamp() + make_interval(secs => run.lease_seconds) END,
        retry_at = statement_timestamp() + make_interval(secs => done.retry_in),
        error_type = done.error_type, error_message = done.error_message,
        error_traceback = done.error_traceback
    FROM unnest(CAST(:ids AS TEXT[]), CAST(:attempts AS INT[]), CAST(:holders AS TEXT[]),
                CAST(:statuses AS TEXT[]), CAST(:reasons AS TEXT[]),
                CAST(:durations AS INT[]), CAST(:retry_in AS FLOAT8[]),
                CAST(:lingering AS BOOLEAN[]), CAST(:waiting_only AS BOOLEAN[]),
                CAST(:error_types AS TEXT[]), CAST(:error_messages AS TEXT[]),
                CAST(:error_tracebacks AS TEXT[]))
         AS done(id, attempt, holder, status, reason, duration_ms, retry_in, lingering,
                 waiting_only, error_type, error_message, error_traceback)
    WHERE run.id = ANY(CAST(:ids AS TEXT[])) AND run.id = done.id
      AND run.attempt = done.attempt AND run.holder = done.holder
      AND (run.status IN ({ACTIVE_SQL})) IS TRUE
      AND (NOT done.waiting_only OR run.status = 'claimed')
    RETURNING run.id, run.attempt, run.holder, run.job, run.period,
              {RETRY_NOTIFY_SQL} AS woke
    ), born AS (
    INSERT INTO {EVENTS} (job, period, kind, subject, run_id, attempt, detail, streak,
                               created_at, state, tries, next_try_at)
    SELECT done.job, done.period, candidate.kind, candidate.subject, done.id, done.attempt,
           CASE WHEN candidate.kind = 'recovered'
                THEN 'after ' || {_RECOVERED_STREAK_SQL} || ' failed period(s) in a row'
                ELSE candidate.detail END,
           CASE WHEN candidate.kind = 'recovered' THEN {_RECOVERED_STREAK_SQL} END,
           statement_timestamp(), 'pending', 0, statement_timestamp()
    FROM unnest(CAST(:event_ids AS TEXT[]), CAST(:event_kinds AS TEXT[]),
                CAST(:event_subjects AS TEXT[]), CAST(:event_details AS TEXT[]))
         AS candidate(id, kind, subject, detail)
    JOIN done ON done.id = candidate.id
    WHERE candidate.kind <> 'recovered' OR {_OPEN_ALERT_SQL} IS TRUE
    ON CONFLICT DO NOTHING
    RETURNING 1
    ), failing AS MATERIALIZED (
    -- Each final failure's streak (none in a batch of successes).
    SELECT done.job, done.period, done.id, done.attempt, failed.detail, failed.need,
           1 + {streaks.before_sql("done.job", "done.period", "failed.cap")} AS streak
    FROM unnest(CAST(:failed_ids AS TEXT[]), CAST(:failed_details AS TEXT[]),
                CAST(:failed_needs AS INT[]), CAST(:failed_caps AS INT[]))
         AS failed(id, detail, need, cap)
    JOIN done ON done.id = failed.id
    ), failed_born AS (
    INSERT INTO {EVENTS} (job, period, kind, subject, run_id, attempt, detail, streak,
                               created_at, state, tries, next_try_at)
    SELECT done.job, done.period, 'failed', '', done.id, done.attempt,
           concat_ws('; ', CASE WHEN done.streak > 1
                                THEN done.streak || ' periods failed in a row' END, done.detail),
           done.streak, statement_timestamp(), 'pending', 0, statement_timestamp()
    FROM failing AS done
    WHERE done.streak >= done.need AND {_OPEN_ALERT_SQL} IS NOT TRUE
    ON CONFLICT DO NOTHING
    RETURNING 1
    ), alerted AS ({alert_notify_sql(_BORN_SQL)})
    SELECT done.id, done.attempt, done.holder, done.woke, failing.streak
    FROM done LEFT JOIN failing ON failing.id = done.id LEFT JOIN alerted ON TRUE
"""


def _finish_postgres(
    database: Database, connection: Connection, outcomes: Sequence[Finish]
) -> list[bool]:
    """The outcomes in rounds, each a statement in which a job has one outcome at most,
    so that each outcome's streak and events see the one before it."""
    written: dict[int, bool] = {}
    for round_ in _rounds(outcomes):
        for index, ok in zip(
            round_, _finish_round(database, connection, [outcomes[i] for i in round_]), strict=True
        ):
            written[index] = ok
    return [written[index] for index in range(len(outcomes))]


def _rounds(outcomes: Sequence[Finish]) -> list[list[int]]:
    """Indexes of the outcomes, the k-th outcome of each job in period order in round k
    (one round when every job has one, as nearly always)."""
    rounds: list[list[int]] = []
    seen: dict[str, int] = {}
    for index in sorted(range(len(outcomes)), key=lambda i: outcomes[i].claim.period):
        outcome = outcomes[index]
        k = seen.get(outcome.claim.job, 0)
        seen[outcome.claim.job] = k + 1
        if k == len(rounds):
            rounds.append([])
        rounds[k].append(index)
    return rounds


def _finish_round(
    database: Database, connection: Connection, outcomes: Sequence[Finish]
) -> list[bool]:
    if not outcomes:
        return []
    failures = [outcome.failure for outcome in outcomes]
    parameters = {
        **fence_arrays([outcome.claim for outcome in outcomes]),
        "statuses": [outcome.status.value for outcome in outcomes],
        "reasons": [outcome.reason.value if outcome.reason else None for outcome in outcomes],
        "durations": [outcome.duration_ms for outcome in outcomes],
        "retry_in": [outcome.retry_in for outcome in outcomes],
        "lingering": [outcome.lingering for outcome in outcomes],
        "waiting_only": [outcome.waiting_only for outcome in outcomes],
        "error_types": [failure.type if failure else None for failure in failures],
        "error_messages": [failure.message if failure else None for failure in failures],
        "error_tracebacks": [failure.traceback if failure else None for failure in failures],
        **alert_events.finish_arrays(outcomes),
    }
    rows = list(connection.execute(_FINISH_POSTGRES, parameters))
    applied = {tuple(row)[:3] for row in rows}
    streak_of = {row[0]: row[4] for row in rows if row[4] is not None}
    for outcome in outcomes:
        if outcome.pause_after is not None and fence_of(outcome.claim) in applied:
            _pause_if_due(database, connection, outcome, streak_of.get(outcome.claim.id))
    written = [fence_of(outcome.claim) in applied for outcome in outcomes]
    refused = [outcome for outcome, ok in zip(outcomes, written, strict=True) if not ok]
    if refused:
        again = iter(_already_written(connection, refused))
        written = [ok or next(again) for ok in written]
    return written


def release(database: Database, claim: Claim, *, after: float = 0.0) -> bool:
    """A lingering attempt's function returned: drop the lease it kept, so its retry
    (if any) may go ahead. Fenced like any write of the attempt. `after` keeps the
    lease that many seconds more (a node about to exit with the function still in it)."""
    lease, parameters = database.lease("after_s", after) if after else ("NULL", {})
    statement = (
        f"UPDATE {RUNS} SET lease_expires_at = {lease} WHERE {MINE_SQL} AND status = 'timed_out'"
    )
    with database.transaction() as connection:
        released = connection.execute(statement, {**fence_params(claim), **parameters})
        if released.rowcount == 1 and not after:
            notify_on(database, connection, Wake.RECOVERY)
        return released.rowcount == 1
