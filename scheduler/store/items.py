"""Items: keys a job has handled, so that a re-run does not handle them twice.

A key is claimed with one `INSERT … ON CONFLICT (job, key) DO NOTHING`; only the
first claimant gets the row back. The insert is fenced on the run (id, attempt,
holder), so a node that lost its run claims nothing more. Given the job's own
connection, the record commits or rolls back with the job's writes.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime
from enum import Enum, StrEnum
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Exists,
    and_,
    delete,
    exists,
    func,
    literal,
    null,
    select,
    true,
    update,
)

from scheduler.model import Claim
from scheduler.states import EventKind
from scheduler.store.database import Database, dialect_insert
from scheduler.store.fence import ACTIVE, fenced
from scheduler.store.schema import events, items, runs


class ItemState(StrEnum):
    CLAIMED = "claimed"
    DONE = "done"


class Taken(Enum):
    """What a claim of a key found."""

    FRESH = "fresh"  # ours now: act on it
    SEEN = "seen"  # claimed before, by this or another run: leave it
    LOST = "lost"  # the run is no longer ours (or not in this database)


def job_connection(connection: object) -> Connection:
    """The Connection behind what a job passed as `connection=`: a Connection or a Session."""
    if isinstance(connection, Connection):
        return connection
    # A Session's job has imported the ORM; the store need not (it costs a node's start).
    orm = sys.modules.get("sqlalchemy.orm")
    if orm is not None and isinstance(connection, orm.Session):
        inner: Connection = connection.connection()
        return inner
    raise TypeError(
        "connection= takes a SQLAlchemy Connection or Session, "
        f"got {type(connection).__module__}.{type(connection).__qualname__}"
    )


def claim(
    database: Database,
    owner: Claim,
    key: str,
    *,
    state: ItemState,
    connection: Connection | None = None,
) -> Taken:
    """Record `key` for the owner's job in one statement; FRESH only to the first claimant.

    With `connection` the statement joins that connection's open transaction and is
    neither committed nor rolled back here.
    """
    if connection is None:
        with database.transaction() as own:
            return _claim(database.now(), own, owner, key, state)
    return _claim(_now(connection), connection, owner, key, state)


def _claim(
    now: ColumnElement[datetime], connection: Connection, owner: Claim, key: str, state: ItemState
) -> Taken:
    source = select(
        runs.c.job,
        literal(key),
        literal(state.value),
        runs.c.period,
        runs.c.id,
        runs.c.attempt,
        runs.c.holder,
        now,
        now if state is ItemState.DONE else null(),
    ).where(fenced(owner))
    statement = (
        _insert(connection)
        .from_select(
            [
                "job",
                "key",
                "state",
                "period",
                "run_id",
                "attempt",
                "node",
                "claimed_at",
                "done_at",
            ],
            source,
        )
        .on_conflict_do_nothing(index_elements=["job", "key"])
        .returning(items.c.key)
    )
    if connection.execute(statement).first() is not None:
        return Taken.FRESH
    still_ours = connection.execute(select(runs.c.id).where(fenced(owner))).first()
    return Taken.SEEN if still_ours else Taken.LOST


def _insert(connection: Connection) -> Any:
    dialect = connection.dialect.name
    return dialect_insert(dialect, items)


def _now(connection: Connection) -> ColumnElement[datetime]:
    """The database clock, through the job's own engine."""
    return Database(connection.engine).now()


def _own(owner: Claim, key: str) -> list[ColumnElement[bool]]:
    """The item as this attempt claimed it, not yet done."""
    return [
        items.c.job == owner.job,
        items.c.key == key,
        items.c.run_id == owner.id,
        items.c.attempt == owner.attempt,
        items.c.state == ItemState.CLAIMED.value,
    ]


def complete(database: Database, owner: Claim, key: str) -> bool:
    """Mark an item this attempt claimed as done; False if it is not ours any more."""
    statement = (
        update(items)
        .where(*_own(owner, key))
        .values(state=ItemState.DONE.value, done_at=database.now())
    )
    with database.transaction() as connection:
        return connection.execute(statement).rowcount == 1


def release(database: Database, owner: Claim, key: str) -> bool:
    """Forget an item this attempt claimed but did not finish, so a retry may redo it."""
    with database.transaction() as connection:
        return connection.execute(delete(items).where(*_own(owner, key))).rowcount == 1


# -- what operators see and do ------------------------------------------------------


@dataclass(frozen=True)
class ItemRow:
    job: str
    key: str
    state: str
    period: datetime
    run_id: str
    attempt: int
    node: str | None
    claimed_at: datetime
    done_at: datetime | None
    # The attempt that claimed it still holds its run: the work may yet finish.
    in_progress: bool

    @property
    def stuck(self) -> bool:
        """Claimed by an attempt that ended without finishing it: check the effect by hand."""
        return self.state == ItemState.CLAIMED and not self.in_progress


def _claimer_active() -> ColumnElement[bool]:
    return exists().where(
        runs.c.id == items.c.run_id,
        runs.c.attempt == items.c.attempt,
        runs.c.status.in_(ACTIVE),
    )


def unreported_stuck_on(connection: Connection) -> bool:
    """Whether an item is stuck that no `stuck_item` event tells of yet (the heartbeat
    asks, so that the alert thread need not look every minute)."""
    return connection.execute(select(unreported_stuck_query())).scalar_one() is True


def unreported_stuck_query() -> Exists:
    reported = exists().where(
        events.c.job == items.c.job,
        events.c.period == items.c.period,
        events.c.kind == EventKind.STUCK_ITEM.value,
        events.c.subject == func.substr(items.c.key, 1, 500),
    )
    stuck = and_(items.c.state == ItemState.CLAIMED.value, ~_claimer_active(), ~reported)
    return exists().where(stuck)


def list_items(
    database: Database, job: str | None, *, stuck_only: bool = False, limit: int = 100
) -> list[ItemRow]:
    """A job's items (every job's for None), most recently claimed first; `stuck_only`
    keeps the stuck ones."""
    conditions = []
    if job is not None:
        conditions.append(items.c.job == job)
    if stuck_only:
        conditions.append(and_(items.c.state == ItemState.CLAIMED.value, ~_claimer_active()))
    return list_items_where(database, and_(true(), *conditions), limit)


def list_items_where(
    database: Database, condition: ColumnElement[bool], limit: int
) -> list[ItemRow]:
    """Items that meet the condition, most recently claimed first."""
    statement = (
        select(items, _claimer_active().label("in_progress"))
        .where(condition)
        .order_by(items.c.claimed_at.desc(), items.c.job, items.c.key)
        .limit(limit)
    )
    with database.transaction() as connection:
        return [_item(row._mapping) for row in connection.execute(statement)]


def get_item(database: Database, job: str, key: str) -> ItemRow | None:
    statement = select(items, _claimer_active().label("in_progress")).where(
        items.c.job == job, items.c.key == key
    )
    with database.transaction() as connection:
        row = connection.execute(statement).first()
    return _item(row._mapping) if row else None


def _item(row: Any) -> ItemRow:
    return ItemRow(**{**row, "in_progress": bool(row["in_progress"])})


def release_item(database: Database, job: str, key: str) -> bool:
    """Forget an item for good, unless the attempt that claimed it is still running."""
    statement = delete(items).where(items.c.job == job, items.c.key == key, ~_claimer_active())
    with database.transaction() as connection:
        return connection.execute(statement).rowcount == 1


def mark_done(database: Database, job: str, key: str) -> bool:
    """Record a stuck item as done, after an operator checked that its effect happened."""
    statement = (
        update(items)
        .where(
            and_(items.c.job == job, items.c.key == key),
            items.c.state == ItemState.CLAIMED.value,
            ~_claimer_active(),
        )
        .values(state=ItemState.DONE.value, done_at=database.now())
    )
    with database.transaction() as connection:
        return connection.execute(statement).rowcount == 1
