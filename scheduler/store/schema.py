"""The tables, as SQLAlchemy metadata: the single source of truth the migrations follow.

Every table carries the `scheduler_` prefix so the scheduler can live in an
application's own database. Only the migrations (and the tests that check them) load
this module: the store's statements are SQL of their own (`store.connection` says how
instants are kept on each backend, as `UTCDateTime` below does for Alembic).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    Computed,
    DateTime,
    Dialect,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    text,
)

from scheduler.store.migrate import VERSION_TABLE

__all__ = ["VERSION_TABLE", "metadata"]

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "pk": "pk_%(table_name)s",
    }
)


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on every backend; SQLite would otherwise hand back naive ones."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r} given where UTC is required")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# The expressions of the runs table's computed columns, as migration 0011 writes them
# (stored on PostgreSQL; SQLite adds them to an existing table as virtual columns).
LIVE_SQL = "status IN ('claimed', 'queued', 'running') OR lease_expires_at IS NOT NULL"
ENDED_STATUS_SQL = "CASE WHEN status IN ('claimed', 'queued', 'running') THEN NULL ELSE status END"
_live_only: dict[str, Any] = {"postgresql_where": text("live"), "sqlite_where": text("live")}

runs = Table(
    "scheduler_runs",
    metadata,
    # (job, period) names a run forever; the primary key is the at-most-once guarantee.
    Column("job", String(200), primary_key=True),
    Column("period", UTCDateTime(), primary_key=True),
    Column("id", String(32), nullable=False, unique=True),
    Column("status", String(16), nullable=False),
    Column("reason", String(16)),
    Column("origin", String(16), nullable=False),
    # attempt is the fencing token: outcome writes are conditional on (id, attempt, holder).
    # It grows at every takeover, whether or not the attempt got to run.
    Column("attempt", Integer, nullable=False),
    # How many attempts called the job's function: only these count against `retries`,
    # so a claim given back before it started (a shutdown, a crash) costs no attempt.
    Column("started_attempts", Integer, nullable=False, server_default="0"),
    Column("holder", String(200)),
    Column("lease_seconds", Float, nullable=False),
    # While set and ahead of the database clock the holder owns the run. Normally only
    # claimed and running rows have one; a timed-out attempt whose function still runs
    # in its thread keeps its lease (the holder renews it) until the function returns,
    # so that its retry cannot start beside it.
    Column("lease_expires_at", UTCDateTime()),
    Column("claimed_at", UTCDateTime(), nullable=False),
    # A run handed to a task queue (`executor=celery(...)`): when its message was sent
    # (status `queued` until a worker starts it) and to which queue; started_at minus
    # queued_at is the time it waited there.
    Column("queued_at", UTCDateTime()),
    Column("queue", String(200)),
    Column("started_at", UTCDateTime()),
    # When the holder said the body had begun (written after the function was called,
    # so no later than this): only a body known to have begun by a period's instant
    # makes that period skip for overlap. A start's commit whose reply never reached its
    # holder leaves this empty: the body may never have run.
    Column("began_at", UTCDateTime()),
    Column("finished_at", UTCDateTime()),
    Column("duration_ms", Integer),
    Column("error_type", String(200)),
    Column("error_message", Text),
    Column("error_traceback", Text),
    # A failed run with attempts left may be re-claimed once this instant has passed.
    Column("retry_at", UTCDateTime()),
    # The job's last `ctx.checkpoint(...)`, as JSON; kept across attempts of the period.
    Column("checkpoint", Text),
    # The pool a run started (or waits) in, and its concurrency key within it: set by the
    # start that the pool's limits admit (or hold back, `reason` 'pool'), never by the
    # claim (0019).
    Column("pool", String(200)),
    Column("pool_key", String(200)),
    # What the indexes hold instead of `status`, so that a start (claimed to running,
    # nothing else indexed changes) is a HOT update: no index touched (migration 0011).
    # A live row is a run in hand, or one whose lease still matters (a timed-out call
    # that lingers): the recovery sweep, renewals and overlap checks read only these.
    Column("live", Boolean, Computed(LIVE_SQL, persisted=True)),
    # The status of a row no longer live or in hand, for the views of failures and
    # missed periods; NULL while claimed, queued or running.
    Column("ended_status", String(16), Computed(ENDED_STATUS_SQL, persisted=True)),
    Index("ix_scheduler_runs_live_lease", "lease_expires_at", **_live_only),
    Index("ix_scheduler_runs_live_job", "job", **_live_only),
    Index("ix_scheduler_runs_live_holder", "holder", **_live_only),
    Index(None, "ended_status"),
    Index(None, "retry_at"),
    # `scheduler prune` finds old periods across every job.
    Index(None, "period"),
    # A fleet's catch-up budget counts catch-up's claims of the last window (0018).
    Index(
        "ix_scheduler_runs_catchup_claimed",
        "claimed_at",
        postgresql_where=text("origin = 'catchup'"),
        sqlite_where=text("origin = 'catchup'"),
    ),
    # A pool's start reads its members in hand (0019): a few rows, of live pooled runs.
    Index(
        "ix_scheduler_runs_live_pool",
        "pool",
        postgresql_where=text("live AND pool IS NOT NULL"),
        sqlite_where=text("live AND pool IS NOT NULL"),
    ),
)

# A pool's limits: the code's (written by each registration) and an operator's, which
# win until reset (0019).
pools = Table(
    "scheduler_pools",
    metadata,
    Column("name", String(200), primary_key=True),
    Column("declared_limit", Integer, nullable=False),
    Column("declared_per_key", Integer),
    Column("declared_at", UTCDateTime(), nullable=False),
    Column("limit_override", Integer),
    Column("per_key_override", Integer),
    Column("changed_by", String(200)),
    Column("changed_at", UTCDateTime()),
)

jobs = Table(
    "scheduler_jobs",
    metadata,
    Column("name", String(200), primary_key=True),
    Column("cron", String(200), nullable=False),
    Column("timezone", String(64), nullable=False),
    # Catch-up never looks further back than the day a job was first seen.
    Column("first_seen", UTCDateTime(), nullable=False),
    Column("last_seen", UTCDateTime(), nullable=False),
    Column("paused", Boolean, nullable=False, default=False),
    Column("paused_at", UTCDateTime()),
    Column("resumed_at", UTCDateTime()),
    # Why the scheduler paused it (a failure streak); NULL for an operator's pause.
    Column("pause_reason", Text),
    # Every period up to here has a row (or was deliberately passed over): catch-up
    # starts after it instead of re-reading history.
    Column("caught_up_to", UTCDateTime()),
    # When a node registered a schedule (cron or time zone) different from the stored
    # one, and what it replaced: catch-up owes the old schedule's periods before this
    # instant and the new schedule's after it, never the new one's past.
    Column("schedule_changed_at", UTCDateTime()),
    Column("previous_cron", String(200)),
    Column("previous_timezone", String(64)),
    # The policy as last registered, so read-only commands (`check`, views) need no code.
    Column("lease_seconds", Float),
    Column("timeout_seconds", Float),
    Column("retries", Integer),
    Column("alert_after_seconds", Float),
    # The calendars its periods skip, as JSON [{name, last}] (`scheduler.calendars`).
    Column("calendars", Text),
)

pauses = Table(
    "scheduler_pauses",
    metadata,
    # Every pause of a job, so that catch-up skips the periods of each one, not only of
    # the latest, when several came and went while no node ran.
    Column("job", String(200), primary_key=True),
    Column("paused_at", UTCDateTime(), primary_key=True),
    # None while the job is still paused.
    Column("resumed_at", UTCDateTime()),
    # Why the scheduler paused it; NULL for an operator's pause.
    Column("reason", Text),
)

attempts = Table(
    "scheduler_attempts",
    metadata,
    # Every attempt of a run, kept when a later attempt overwrites the run's row.
    Column("run_id", String(32), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("job", String(200), nullable=False),
    Column("period", UTCDateTime(), nullable=False),
    Column("node", String(200)),
    Column("status", String(16), nullable=False),
    Column("reason", String(16)),
    Column("started_at", UTCDateTime()),
    Column("finished_at", UTCDateTime()),
    Column("duration_ms", Integer),
    Column("error_type", String(200)),
    Column("error_message", Text),
    Column("error_traceback", Text),
    Index(None, "job", "period"),
)

nodes = Table(
    "scheduler_nodes",
    metadata,
    Column("id", String(200), primary_key=True),
    Column("name", String(200), nullable=False),
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("version", String(32), nullable=False),
    Column("started_at", UTCDateTime(), nullable=False),
    Column("heartbeat_at", UTCDateTime(), nullable=False),
    Column("stopped_at", UTCDateTime()),
    # Which jobs the node runs (a digest of names and schedules): nodes with the same
    # digest share out the periods due at one instant (see scheduler/node/peers.py).
    Column("jobs_digest", String(64)),
    # PostgreSQL, direct connection: the key of the session advisory lock the node holds
    # on a connection of its own for as long as it lives. Its absence from pg_locks means
    # the node is gone (its runs are retaken at once). NULL: the lease alone decides.
    Column("liveness_key", Integer),
    # When the node took the lock under `liveness_key`, by the database clock: a peer
    # whose own lock is older and still held knows this one was held while it watched.
    Column("liveness_since", UTCDateTime()),
    # The process itself (boot, pid namespace, pid, start time, see `model.NodeIdentity`):
    # evidence that an earlier incarnation on this host is gone which a pid alone is not.
    Column("process", String(200)),
)

items = Table(
    "scheduler_items",
    metadata,
    # (job, key) is claimed once, ever: a re-run, retry or takeover skips what is recorded.
    Column("job", String(200), primary_key=True),
    Column("key", String(500), primary_key=True),
    # `claimed` until the work is known to be finished, then `done`.
    Column("state", String(16), nullable=False),
    # The run that claimed it: period, id, attempt and node.
    Column("period", UTCDateTime(), nullable=False),
    Column("run_id", String(32), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("node", String(200)),
    Column("claimed_at", UTCDateTime(), nullable=False),
    Column("done_at", UTCDateTime()),
    # `scheduler prune` deletes old done items.
    Index(None, "state", "done_at"),
)

requests = Table(
    "scheduler_requests",
    metadata,
    # What an operator asked the fleet to run (`trigger`, `rerun`, `backfill`) from a
    # process that must not run jobs itself (the web console). A live node that knows
    # the job takes it, once: `taken_by` is compare-and-set from NULL.
    Column("id", String(32), primary_key=True),
    Column("job", String(200), nullable=False),
    Column("kind", String(16), nullable=False),
    # rerun: the period; backfill: the range, both ends included.
    Column("period", UTCDateTime()),
    Column("range_start", UTCDateTime()),
    Column("range_end", UTCDateTime()),
    Column("force", Boolean, nullable=False, default=False),
    Column("include_failed", Boolean, nullable=False, default=False),
    Column("requested_at", UTCDateTime(), nullable=False),
    # Who asked, as authenticated: kept with the request for the record.
    Column("requested_by", String(200), nullable=False),
    Column("taken_by", String(200)),
    Column("taken_at", UTCDateTime()),
    Column("finished_at", UTCDateTime()),
    # done, refused or expired, with a line saying what was claimed or why not (while
    # under way: what its takers did so far).
    Column("outcome", String(16)),
    Column("detail", Text),
    # trigger and rerun: the run it claimed.
    Column("run_id", String(32)),
    # The taker holds it until then, renewed by each write of its carrying out; a hold
    # that lapsed before the outcome was written lets any node take it again.
    Column("taken_until", UTCDateTime()),
    # How many times it was taken: the fence of the taker's writes, with `taken_by`.
    Column("tries", Integer, nullable=False, server_default="0"),
    # backfill: the last period of the range a take claimed, so that the next take (after
    # a fault or a dead taker) goes on after it instead of running a period twice.
    Column("progress", UTCDateTime()),
    Index(None, "taken_by", "requested_at"),
    Index(None, "job", "requested_at"),
    # What waits for a node: the unfinished requests, few among all.
    Index(None, "finished_at"),
)

job_sets = Table(
    "scheduler_job_sets",
    metadata,
    # The jobs of each set of jobs a node was started with, under the set's digest (the
    # nodes' `jobs_digest`): a node selects its own jobs' requests and alert events by a
    # join on it, without sending the names (10,000 of them) in every poll.
    Column("job", String(200), primary_key=True),
    Column("digest", String(64), primary_key=True),
    # When a node last registered the set; a set no node uses is pruned after retention.
    Column("registered_at", UTCDateTime(), nullable=False),
)

events = Table(
    "scheduler_events",
    metadata,
    # One row per thing an alert hook hears about, written in the same transaction as
    # the run row that gave rise to it: the key makes it once per fleet. `subject` tells
    # apart events of one kind in one period (the attempt of a retry, an item's key),
    # '' when there is one.
    Column("job", String(200), primary_key=True),
    Column("period", UTCDateTime(), primary_key=True),
    Column("kind", String(16), primary_key=True),
    Column("subject", String(500), primary_key=True),
    Column("run_id", String(32)),
    Column("attempt", Integer),
    Column("reason", String(16)),
    # One line for a human: the error, how many periods were missed, the item's key.
    Column("detail", Text),
    # `failed`: how many periods in a row had failed when it was born; `recovered`: how
    # many the streak it ends had (up to a cap).
    Column("streak", Integer),
    Column("created_at", UTCDateTime(), nullable=False),
    # pending, delivered, failed (tries ran out) or unrouted (no hook listens, or nobody
    # has run the job for a day).
    Column("state", String(16), nullable=False),
    Column("tries", Integer, nullable=False, server_default="0"),
    Column("next_try_at", UTCDateTime(), nullable=False),
    # The node delivering it, until when: taken by compare-and-set, like a request.
    Column("taken_by", String(200)),
    Column("taken_until", UTCDateTime()),
    Column("delivered_at", UTCDateTime()),
    # Hooks that already took it (one name a line), so a retry calls only the others.
    Column("delivered_to", Text),
    Column("last_error", Text),
    Index(None, "state", "next_try_at"),
    Index(None, "created_at"),
)

# The key sorts byte by byte on both backends (PostgreSQL's "C" collation, SQLite's
# BINARY), so that a tenant's schedules are one range of the primary key: `tenant-42:`
# up to the next prefix, whatever the database's collation.
_SCHEDULE_KEY = String(190).with_variant(String(190, collation="C"), "postgresql")
_DUE_ONLY: dict[str, Any] = {
    "postgresql_where": text("next_due_at IS NOT NULL AND NOT paused AND deleted_at IS NULL"),
    "sqlite_where": text("next_due_at IS NOT NULL AND NOT paused AND deleted_at IS NULL"),
}

schedules = Table(
    "scheduler_schedules",
    metadata,
    # Chosen by the application (`tenant-42:weekly-report`); its periods are the runs of
    # the job `@<key>`, so (key, period) names a period for ever, as (job, period) does.
    Column("key", _SCHEDULE_KEY, primary_key=True),
    # The code-declared job whose function runs, with `args`.
    Column("job", String(200), nullable=False),
    # The trigger: `cron` in `timezone`, `every` seconds from `start_at`, or once `at`.
    Column("trigger", String(8), nullable=False),
    Column("cron", String(200)),
    Column("timezone", String(64), nullable=False),
    Column("every_seconds", Integer),
    Column("start_at", UTCDateTime()),
    Column("once_at", UTCDateTime()),
    # The function's keyword arguments, as a JSON object.
    Column("args", Text, nullable=False),
    # Overrides of the job's catch-up policy; NULL: the job's own.
    Column("catchup", String(16)),
    Column("catchup_window_seconds", Float),
    Column("catchup_limit", Integer),
    # Its own jitter (a delay in [0, jitter) per period, the same on every node); NULL:
    # the job's.
    Column("jitter_seconds", Float),
    Column("paused", Boolean, nullable=False, default=False),
    Column("paused_at", UTCDateTime()),
    # Why the scheduler paused it (a failure streak); NULL for a pause by the application.
    Column("pause_reason", Text),
    # The earliest period not yet fired (NULL: none left, a one-off that fired); the
    # stretches of earlier triggers still owed, as JSON (see `scheduler.firing`).
    Column("next_due_at", UTCDateTime()),
    # The period `next_due_at` fires, when jitter puts it later than the period itself.
    Column("next_period", UTCDateTime()),
    Column("owed", Text),
    # Raised by every change: what a reader saw is what it changes.
    Column("version", Integer, nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    # Its last pass: when, and by which node.
    Column("fired_at", UTCDateTime()),
    Column("fired_by", String(200)),
    # A deleted schedule fires nothing more; the row stays until retention, so that the
    # periods it claimed before its deletion still find their job and arguments.
    Column("deleted_at", UTCDateTime()),
    # Only rows that will fire are indexed, by job: a node's pass reads the range of its
    # jobs' rows due now, and its wait the first row of each job (`store.schedules`).
    Index("ix_scheduler_schedules_due", "job", "next_due_at", **_DUE_ONLY),
    # The few the scheduler paused after a failure streak, for `check`.
    Index(
        "ix_scheduler_schedules_failure_paused",
        "job",
        postgresql_where=text("pause_reason IS NOT NULL AND deleted_at IS NULL"),
        sqlite_where=text("pause_reason IS NOT NULL AND deleted_at IS NULL"),
    ),
)
