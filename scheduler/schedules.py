"""Schedules created at run time: bind a code-declared job to a trigger and arguments
while the application runs, one per tenant if need be.

```python
from scheduler.schedules import Schedules

schedules = Schedules("postgresql://app@db/app")
with engine.begin() as connection:            # the application's own transaction
    connection.execute(insert(tenants).values(id=42))
    schedules.create(
        "tenant-42:weekly-report", "reports.weekly",
        cron="0 9 * * MON", timezone="Europe/Paris", args={"tenant": 42},
        connection=connection,
    )                                          # commits with the tenant, or not at all
```

The function stays declared in code (`@job`); a schedule gives it a key chosen by the
application, a trigger (cron, `every=` from a `start`, or once `at=`), a time zone, JSON
arguments (passed to the function as keywords, and on `ctx.args`) and, if it wants, its
own catch-up policy. Each period is the run `(@<key>, period)`, claimed by the same
primary key as any job's, so it runs at most once across every node; every node hears
of a change within a second (NOTIFY on PostgreSQL; a poll elsewhere). Bad input raises
`ScheduleDefinitionError`, naming the schedule and the field, before anything is
written.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any

from scheduler import firing
from scheduler import policy as policy_fields
from scheduler.durations import Duration
from scheduler.errors import JobDefinitionError, ScheduleDefinitionError, UserError
from scheduler.policy import Catchup, Policy
from scheduler.registry import Job
from scheduler.store import migrate as migrations
from scheduler.store import schedules as rows
from scheduler.store.database import Database, open_database
from scheduler.store.schedules import Page, ScheduleRow
from scheduler.triggers import Trigger, parse_trigger

# Longest key: its runs are the job `@<key>`, within the 200 characters of a job name.
KEY_MAX = 190
# Arguments are stored with the schedule; keep them small (a tenant id, a few options).
ARGS_MAX = 16_384


class ScheduleExistsError(UserError):
    """`create` of a key that a live schedule already has."""


class ScheduleNotFoundError(UserError):
    """A change of a key that names no live schedule."""


@dataclass(frozen=True)
class Schedule:
    """A schedule as it stands."""

    key: str
    job: str
    trigger: Trigger
    args: dict[str, Any]
    paused: bool
    # The next period it will fire (None: a one-off that has fired, or nothing left).
    next_due: datetime | None
    catchup: str | None
    catchup_window: timedelta | None
    catchup_limit: int | None
    jitter: timedelta | None
    version: int
    created_at: datetime
    updated_at: datetime
    fired_at: datetime | None
    deleted_at: datetime | None
    # Why the scheduler paused it (`pause_after_failures`); None for the application's.
    pause_reason: str | None = None

    @property
    def run_job(self) -> str:
        """The job name its runs carry (`@<key>`), as `runs --job` takes it."""
        return rows.run_job(self.key)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for `--json` and the console."""
        trigger = self.trigger
        return {
            "key": self.key,
            "job": self.job,
            "trigger": trigger.kind.value,
            "cron": trigger.cron,
            "timezone": trigger.timezone,
            "every_seconds": int(trigger.every.total_seconds()) if trigger.every else None,
            "start": _iso(trigger.start),
            "at": _iso(trigger.at),
            "describe": trigger.describe(),
            "args": self.args,
            "paused": self.paused,
            "pause_reason": self.pause_reason,
            "next_due": _iso(self.next_due),
            "catchup": self.catchup,
            "catchup_window_seconds": self.catchup_window.total_seconds()
            if self.catchup_window
            else None,
            "catchup_limit": self.catchup_limit,
            "jitter_seconds": self.jitter.total_seconds() if self.jitter else None,
            "version": self.version,
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.updated_at),
            "fired_at": _iso(self.fired_at),
            "deleted_at": _iso(self.deleted_at),
        }


@dataclass(frozen=True)
class Listing:
    schedules: list[Schedule]
    # Pass as `after` for the next page; None on the last.
    next_after: str | None


_UNSET: Any = object()
# A schedule's own policy, over its job's: catch-up, its window (s), its limit, jitter (s).
Overrides = tuple[str | None, float | None, int | None, float | None]


@dataclass(frozen=True)
class Spec:
    """One schedule to create, as `create` takes it: for `create_many`."""

    key: str
    job: str | Job
    cron: str | None = None
    every: Duration | None = None
    start: datetime | str | None = None
    at: datetime | str | None = None
    timezone: str = "UTC"
    args: dict[str, Any] | None = None
    catchup: str | None = None
    catchup_window: Duration | None = None
    catchup_limit: int | None = None
    jitter: Duration | None = None
    paused: bool = False


class Schedules:
    """Create, change, pause, resume, delete and read schedules. Every change takes
    `connection=` (the application's SQLAlchemy Connection or Session, psycopg or
    sqlite3 connection, on the scheduler's database) to join its transaction."""

    def __init__(self, database: Database | str) -> None:
        self._owned = isinstance(database, str)
        self._database = (
            open_database(database, connections=2) if isinstance(database, str) else database
        )
        try:
            migrations.require_current_schema(self._database)
        except UserError:
            self.close()
            raise

    def close(self) -> None:
        """Close the database opened from a URL; one given as a `Database` stays open."""
        if self._owned:
            self._database.dispose()

    def __enter__(self) -> Schedules:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    # -- changes ------------------------------------------------------------------

    def create(
        self,
        key: str,
        job: str | Job,
        *,
        cron: str | None = None,
        every: Duration | None = None,
        start: datetime | str | None = None,
        at: datetime | str | None = None,
        timezone: str = "UTC",
        args: dict[str, Any] | None = None,
        catchup: str | None = None,
        catchup_window: Duration | None = None,
        catchup_limit: int | None = None,
        jitter: Duration | None = None,
        paused: bool = False,
        connection: object | None = None,
    ) -> Schedule:
        """A new schedule; `ScheduleExistsError` if the key has a live one (a deleted
        one's key may be taken again: periods it already claimed are not run twice)."""
        spec = Spec(
            key,
            job,
            cron,
            every,
            start,
            at,
            timezone,
            args,
            catchup,
            catchup_window,
            catchup_limit,
            jitter,
            paused,
        )
        return self._put(spec, connection=connection, replace=False)

    def create_many(self, specs: Iterable[Spec], *, connection: object | None = None) -> int:
        """Create many schedules at once (a tenant import, a migration from another
        scheduler): every one is checked first, and then all are written in one
        transaction, or none (`ScheduleExistsError` names the keys already live)."""
        checked: list[tuple[Spec, str, str, Overrides]] = []
        seen: set[str] = set()
        for spec in specs:
            key = _check_key(spec.key)
            if key in seen:
                raise ScheduleExistsError(f"schedule {key!r}: key: given twice")
            seen.add(key)
            name = spec.job.name if isinstance(spec.job, Job) else _check_job_name(key, spec.job)
            policy = _overrides(
                key, spec.catchup, spec.catchup_window, spec.catchup_limit, spec.jitter
            )
            _check_pool_key(key, spec.job, spec.args or {})
            checked.append((spec, name, _check_args(key, spec.args or {}), policy))
        if not checked:
            return 0
        with rows.within(self._database, connection) as conn:
            now = rows.clock(conn)
            local = {spec.job.name for spec, *_ in checked if isinstance(spec.job, Job)}
            named = {name for _, name, *_ in checked} - local
            unknown = named - rows.known_jobs(conn, named)
            new = []
            for spec, name, arguments, policy in checked:
                if name in unknown:
                    raise ScheduleDefinitionError(
                        spec.key, "job", f"no node has registered a job {name!r}"
                    )
                trigger = self._trigger(spec, policy, now)
                new.append(
                    _new_row(
                        spec.key,
                        name,
                        trigger,
                        arguments=arguments,
                        policy=policy,
                        paused=spec.paused,
                        now=now,
                    )
                )
            taken = rows.insert_many(conn, new)
            if taken:
                shown = ", ".join(repr(key) for key in taken[:5])
                more = f" and {len(taken) - 5} more" if len(taken) > 5 else ""
                raise ScheduleExistsError(
                    f"schedule {taken[0]!r}: key: taken already ({shown}{more}); none was written"
                )
            return len(new)

    @staticmethod
    def _trigger(spec: Spec, policy: Overrides, now: datetime) -> Trigger:
        trigger = parse_trigger(
            spec.key,
            cron=spec.cron,
            every=spec.every,
            start=spec.start,
            at=spec.at,
            timezone=spec.timezone,
            now=now,
        )
        if trigger.at is not None and trigger.at < now - _window(policy):
            raise ScheduleDefinitionError(
                spec.key, "at", f"{trigger.at.isoformat()} is past the catch-up window"
            )
        return trigger

    def replace(
        self,
        key: str,
        job: str | Job,
        *,
        cron: str | None = None,
        every: Duration | None = None,
        start: datetime | str | None = None,
        at: datetime | str | None = None,
        timezone: str = "UTC",
        args: dict[str, Any] | None = None,
        catchup: str | None = None,
        catchup_window: Duration | None = None,
        catchup_limit: int | None = None,
        jitter: Duration | None = None,
        paused: bool = False,
        connection: object | None = None,
    ) -> Schedule:
        """Create the schedule, or make an existing one exactly this (idempotent: what a
        deployment or a sync from the application's own table calls). A changed trigger
        keeps what the old one owes and never runs the new one's past."""
        spec = Spec(
            key,
            job,
            cron,
            every,
            start,
            at,
            timezone,
            args,
            catchup,
            catchup_window,
            catchup_limit,
            jitter,
            paused,
        )
        return self._put(spec, connection=connection, replace=True)

    def change(
        self,
        key: str,
        *,
        cron: str | None = None,
        every: Duration | None = None,
        start: datetime | str | None = None,
        at: datetime | str | None = None,
        timezone: str | None = None,
        args: dict[str, Any] | None = None,
        catchup: str | None = _UNSET,
        catchup_window: Duration | None = _UNSET,
        catchup_limit: int | None = _UNSET,
        jitter: Duration | None = _UNSET,
        connection: object | None = None,
    ) -> Schedule:
        """Change some fields of a live schedule; a new trigger (any of cron, every, at)
        replaces the old one, as in `replace`."""
        key = _check_key(key)
        with rows.within(self._database, connection) as conn:
            row = self._live(conn, key)
            now = rows.clock(conn)
            old = firing.trigger_from(row.trigger_columns)
            trigger = old
            if any(value is not None for value in (cron, every, at)) or timezone is not None:
                if cron is None and every is None and at is None:
                    cron, every, start, at = _same_trigger(old, start)
                trigger = parse_trigger(
                    key,
                    cron=cron,
                    every=every,
                    start=start,
                    at=at,
                    timezone=timezone if timezone is not None else old.timezone,
                    now=now,
                )
            elif start is not None:
                raise ScheduleDefinitionError(key, "start", "give `every` with a new start")
            policy = _overrides(
                key,
                row.catchup if catchup is _UNSET else catchup,
                _seconds(row.catchup_window_seconds)
                if catchup_window is _UNSET
                else catchup_window,
                row.catchup_limit if catchup_limit is _UNSET else catchup_limit,
                _seconds(row.jitter_seconds) if jitter is _UNSET else jitter,
            )
            new = self._moved(
                row,
                trigger,
                now,
                args=_check_args(key, args) if args is not None else row.args,
                policy=policy,
            )
            _write(conn, new, row.version)
            return _schedule(new)

    def pause(self, key: str, *, connection: object | None = None) -> Schedule:
        """Stop firing: the periods while paused are never run (the pause is their
        record); those owed before it still are, once resumed."""
        key = _check_key(key)
        with rows.within(self._database, connection) as conn:
            row = self._live(conn, key)
            if row.paused:
                return _schedule(row)
            now = rows.clock(conn)
            new = _replace_row(
                row,
                paused=True,
                paused_at=now,
                pause_reason=None,
                updated_at=now,
                version=row.version + 1,
            )
            _write(conn, new, row.version)
            return _schedule(new)

    def resume(self, key: str, *, connection: object | None = None) -> Schedule:
        """Fire again from now: the first period after the resume, and what was owed
        before the pause."""
        key = _check_key(key)
        with rows.within(self._database, connection) as conn:
            row = self._live(conn, key)
            if not row.paused:
                return _schedule(row)
            now = rows.clock(conn)
            state = _state(row)
            moved = firing.cut(state, row.paused_at or now, resume=now)
            new = _replace_row(
                row,
                paused=False,
                paused_at=None,
                pause_reason=None,
                next_due_at=moved.next_due,
                next_period=None,
                owed=firing.owed_text(moved.owed),
                updated_at=now,
                version=row.version + 1,
            )
            _write(conn, new, row.version)
            return _schedule(new)

    def delete(self, key: str, *, connection: object | None = None) -> bool:
        """Fire nothing more from the moment this commits; a period already claimed runs
        to its end. False if there was no live schedule of that key."""
        key = _check_key(key)
        with rows.within(self._database, connection) as conn:
            row = rows.read(conn, key, lock=True)
            if row is None or row.deleted_at is not None:
                return False
            now = rows.clock(conn)
            new = _replace_row(
                row,
                next_due_at=None,
                next_period=None,
                owed=None,
                deleted_at=now,
                updated_at=now,
                version=row.version + 1,
            )
            _write(conn, new, row.version)
            rows.settle_deferred(conn, key)
            return True

    # -- reading ------------------------------------------------------------------

    def get(self, key: str, *, connection: object | None = None) -> Schedule | None:
        """The live schedule of that key, or None."""
        with rows.within(self._database, connection) as conn:
            row = rows.read(conn, _check_key(key))
        return _schedule(row) if row is not None and row.deleted_at is None else None

    def list(
        self,
        prefix: str = "",
        *,
        after: str | None = None,
        limit: int = 100,
        job: str | None = None,
        paused: bool | None = None,
        deleted: bool = False,
    ) -> Listing:
        """Schedules in key order, a page at a time; `prefix` keeps one tenant's
        (`"tenant-42:"`), `after` is the previous page's `next_after`."""
        found: Page = rows.page(
            self._database,
            prefix=prefix,
            after=after,
            limit=limit,
            job=job,
            paused=paused,
            deleted=deleted,
        )
        return Listing([_schedule(row) for row in found.rows], found.next_after)

    # -- inside -------------------------------------------------------------------

    def _put(self, spec: Spec, *, connection: object | None, replace: bool) -> Schedule:
        """`create` (`replace` False) or `replace` one schedule."""
        key = _check_key(spec.key)
        job, paused = spec.job, spec.paused
        local = isinstance(job, Job)
        name = job.name if isinstance(job, Job) else _check_job_name(key, job)
        arguments = _check_args(key, spec.args if spec.args is not None else {})
        _check_pool_key(key, job, spec.args if spec.args is not None else {})
        policy = _overrides(key, spec.catchup, spec.catchup_window, spec.catchup_limit, spec.jitter)
        with rows.within(self._database, connection) as conn:
            now = rows.clock(conn)
            trigger = self._trigger(spec, policy, now)
            if not local and not rows.job_known(conn, name):
                raise ScheduleDefinitionError(
                    key,
                    "job",
                    f"no node has registered a job {name!r} (give the Job itself "
                    "to create a schedule before any node runs it)",
                )
            row = rows.read(conn, key, lock=True)
            if row is not None and row.deleted_at is None:
                if not replace:
                    raise ScheduleExistsError(
                        f"schedule {key!r}: key: a schedule with this key exists"
                    )
                new = self._moved(row, trigger, now, args=arguments, policy=policy)
                new = _replace_row(new, job=name)
                if paused and not new.paused:
                    new = _replace_row(new, paused=True, paused_at=now)
                _write(conn, new, row.version)
                return _schedule(new)
            new = _new_row(
                key, name, trigger, arguments=arguments, policy=policy, paused=paused, now=now
            )
            if row is not None:  # a deleted one's key, taken again
                _write(conn, _replace_row(new, version=row.version + 1), row.version)
            elif not rows.insert(conn, new):
                raise ScheduleExistsError(f"schedule {key!r}: key: a schedule with this key exists")
            return _schedule(new)

    def _live(self, conn: Any, key: str) -> ScheduleRow:
        row = rows.read(conn, key, lock=True)
        if row is None or row.deleted_at is not None:
            raise ScheduleNotFoundError(f"schedule {key!r}: key: no such schedule")
        return row

    @staticmethod
    def _moved(
        row: ScheduleRow,
        trigger: Trigger,
        now: datetime,
        *,
        args: str,
        policy: Overrides,
    ) -> ScheduleRow:
        """The row with a new trigger from `now` (the old one's owed periods kept), new
        arguments and policy."""
        state = _state(row)
        old = state.trigger
        if trigger != old:
            # A paused schedule changes at its pause: its owed periods end there.
            state = firing.cut(
                state,
                row.paused_at if row.paused and row.paused_at else now,
                trigger=trigger,
                resume=now if not row.paused else None,
            )
        return _replace_row(
            row,
            **firing.trigger_columns(trigger),
            next_due_at=state.next_due,
            owed=firing.owed_text(state.owed),
            args=args,
            catchup=policy[0],
            catchup_window_seconds=policy[1],
            catchup_limit=policy[2],
            jitter_seconds=policy[3],
            next_period=None,
            updated_at=now,
            version=row.version + 1,
        )


# -- helpers --------------------------------------------------------------------------


def _new_row(
    key: str,
    job: str,
    trigger: Trigger,
    *,
    arguments: str,
    policy: Overrides,
    paused: bool,
    now: datetime,
) -> ScheduleRow:
    return ScheduleRow(
        key=key,
        job=job,
        **firing.trigger_columns(trigger),
        args=arguments,
        catchup=policy[0],
        catchup_window_seconds=policy[1],
        catchup_limit=policy[2],
        jitter_seconds=policy[3],
        paused=paused,
        paused_at=now if paused else None,
        next_due_at=firing.start(trigger, now).next_due,
        next_period=None,
        owed=None,
        version=1,
        created_at=now,
        updated_at=now,
        fired_at=None,
        fired_by=None,
        deleted_at=None,
    )


def _write(conn: Any, row: ScheduleRow, seen: int) -> None:
    if not rows.write(conn, row, seen):  # the row is locked: cannot happen on PostgreSQL
        raise UserError(f"schedule {row.key!r}: version: changed by another writer, try again")


def _replace_row(row: ScheduleRow, **changes: Any) -> ScheduleRow:
    return dataclasses.replace(row, **changes)


def _state(row: ScheduleRow) -> firing.State:
    return firing.State(
        firing.trigger_from(row.trigger_columns),
        row.next_period or row.next_due_at,
        firing.owed_from(row.owed),
    )


def _schedule(row: ScheduleRow) -> Schedule:
    return Schedule(
        key=row.key,
        job=row.job,
        trigger=firing.trigger_from(row.trigger_columns),
        args=json.loads(row.args),
        paused=row.paused,
        next_due=row.next_period or row.next_due_at,
        catchup=row.catchup,
        catchup_window=_seconds(row.catchup_window_seconds),
        catchup_limit=row.catchup_limit,
        jitter=_seconds(row.jitter_seconds),
        version=row.version,
        created_at=row.created_at,
        updated_at=row.updated_at,
        fired_at=row.fired_at,
        pause_reason=row.pause_reason,
        deleted_at=row.deleted_at,
    )


def _check_key(key: object) -> str:
    if not isinstance(key, str) or not key.strip() or len(key) > KEY_MAX:
        raise ScheduleDefinitionError(
            str(key), "key", f"must be a non-empty string of ≤ {KEY_MAX} characters"
        )
    if any(ord(character) < 32 for character in key):
        raise ScheduleDefinitionError(key, "key", "must not hold control characters")
    return key


def _check_job_name(key: str, job: object) -> str:
    if not isinstance(job, str) or not job.strip():
        raise ScheduleDefinitionError(key, "job", f"must be a job's name or the Job, got {job!r}")
    return job


def _check_pool_key(key: str, job: object, args: object) -> None:
    """A template's concurrency key names the schedule's arguments (`"{tenant}"`): they
    must hold what it names. Checked where the Job is given; a schedule created by name
    whose arguments lack it is capped under the key as written."""
    if not isinstance(job, Job) or job.policy.concurrency_key is None or not isinstance(args, dict):
        return
    template = job.policy.concurrency_key
    try:
        policy_fields.key_for(job.name, template, args)
    except JobDefinitionError as error:
        message = str(error).split(": ", 2)[-1]
        raise ScheduleDefinitionError(
            key, "args", f"{message}: job {job.name!r} takes its concurrency key from {template!r}"
        ) from None


def _check_args(key: str, args: object) -> str:
    if not isinstance(args, dict):
        raise ScheduleDefinitionError(
            key, "args", f"must be a dict of keyword arguments, got {args!r}"
        )
    if any(not isinstance(name, str) or not name.isidentifier() for name in args):
        raise ScheduleDefinitionError(key, "args", "every name must be a Python identifier")
    try:
        text = json.dumps(args, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ScheduleDefinitionError(key, "args", f"must be JSON: {error}") from None
    if len(text) > ARGS_MAX:
        raise ScheduleDefinitionError(
            key, "args", f"must be ≤ {ARGS_MAX} bytes as JSON, got {len(text)}"
        )
    return text


def _overrides(
    key: str,
    catchup: str | None,
    window: Duration | None,
    limit: int | None,
    jitter: Duration | None = None,
) -> Overrides:
    """The schedule's own catch-up and jitter, checked as `@job` checks them."""
    try:
        return (
            policy_fields.choice(key, "catchup", catchup, Catchup).value
            if catchup is not None
            else None,
            policy_fields.duration(key, "catchup_window", window).total_seconds()
            if window is not None
            else None,
            policy_fields.count(key, "catchup_limit", limit, minimum=1)
            if limit is not None
            else None,
            policy_fields.duration(key, "jitter", jitter).total_seconds()
            if jitter is not None
            else None,
        )
    except JobDefinitionError as error:
        message = str(error).split(": ", 2)[-1]
        raise ScheduleDefinitionError(key, error.field, message) from None


def _window(policy: Overrides) -> timedelta:
    return timedelta(seconds=policy[1]) if policy[1] is not None else Policy().catchup_window


def _same_trigger(
    old: Trigger, start: datetime | str | None
) -> tuple[str | None, Duration | None, datetime | str | None, datetime | None]:
    """The old trigger's own fields, for a change of its time zone alone."""
    return old.cron, old.every, start if start is not None else old.start, old.at


def _seconds(value: float | None) -> timedelta | None:
    return timedelta(seconds=value) if value is not None else None


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z") if value is not None else None
