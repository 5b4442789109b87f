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

from scheduler.model import Claim
from scheduler.states import EventKind
from scheduler.store.connection import ForeignConnection
from scheduler.store.database import Connection, Database
from scheduler.store.events import EVENTS
from scheduler.store.fence import ACTIVE_SQL, FENCED_SQL, RUNS, fence_params

ITEMS = "scheduler_items"


class ItemState(StrEnum):
    CLAIMED = "claimed"
    DONE = "done"


class Taken(Enum):
    """What a claim of a key found."""

    FRESH = "fresh"  # ours now: act on it
    SEEN = "seen"  # claimed before, by this or another run: leave it
    LOST = "lost"  # the run is no longer ours (or not in this database)


def job_connection(connection: object) -> Connection:
    """The store's connection over what a job passed as `connection=` (a SQLAlchemy
    Connection or Session, or a Django connection inside `transaction.atomic()`), inside
    the job's own transaction. The library is the job's: the store finds its classes only
    if the job has loaded them."""
    if _is_django(connection):
        return _django_connection(connection)
    engine = sys.modules.get("sqlalchemy.engine")
    orm = sys.modules.get("sqlalchemy.orm")
    if orm is not None and isinstance(connection, orm.Session):
        connection = connection.connection()
    if engine is None or not isinstance(connection, engine.Connection):
        raise TypeError(
            "connection= takes a SQLAlchemy Connection or Session, or a Django connection, "
            f"got {type(connection).__module__}.{type(connection).__qualname__}"
        )
    backend = connection.dialect.name
    if backend not in ("postgresql", "sqlite"):
        raise TypeError(f"connection= is on {backend}, not on the scheduler's database")
    return ForeignConnection(connection, backend)


def _is_django(connection: object) -> bool:
    """A Django connection: `connections[alias]`, or the proxy `django.db.connection`
    (which hands every attribute on to the default alias's)."""
    wrappers = sys.modules.get("django.db.backends.base.base")
    proxies = sys.modules.get("django.utils.connection")
    return (wrappers is not None and isinstance(connection, wrappers.BaseDatabaseWrapper)) or (
        proxies is not None and isinstance(connection, proxies.ConnectionProxy)
    )


def _django_connection(wrapper: Any) -> Connection:
    """Django's connection (`django.db.connection`, or `connections[alias]`): its driver
    connection (psycopg 3 or sqlite3) in the transaction `atomic()` opened, so that the
    record commits with the ORM's rows. Outside `atomic()` Django commits each statement
    alone, and the record would not wait for the rows: refused."""
    backend = wrapper.vendor
    if backend not in ("postgresql", "sqlite"):
        raise TypeError(f"connection= is on {backend}, not on the scheduler's database")
    if not wrapper.in_atomic_block:
        raise ValueError(
            "connection= a Django connection must be inside transaction.atomic(), so that "
            "the record commits with your rows"
        )
    wrapper.ensure_connection()
    return Connection(wrapper.connection, backend)


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
            return _claim(own, owner, key, state)
    return _claim(connection, owner, key, state)


def _claim(connection: Connection, owner: Claim, key: str, state: ItemState) -> Taken:
    # The clock of the database the connection is on: the server's, or this host's.
    now = "statement_timestamp()" if connection.is_postgres else ":now"
    done = now if state is ItemState.DONE else "NULL"
    statement = f"""
        INSERT INTO {ITEMS} (job, key, state, period, run_id, attempt, node, claimed_at,
                             done_at)
        SELECT job, :key, :state, period, id, attempt, holder, {now}, {done}
        FROM {RUNS} WHERE {FENCED_SQL}
        ON CONFLICT (job, key) DO NOTHING
        RETURNING key
    """
    parameters = {**fence_params(owner), "key": key, "state": state.value}
    if connection.execute(statement, parameters).first() is not None:
        return Taken.FRESH
    still_ours = connection.execute(
        f"SELECT id FROM {RUNS} WHERE {FENCED_SQL}",
        fence_params(owner),
    ).first()
    return Taken.SEEN if still_ours else Taken.LOST


# The item as this attempt claimed it, not yet done (parameters from `_own`).
_OWN_SQL = (
    "job = :job AND key = :key AND run_id = :run_id AND attempt = :attempt AND state = 'claimed'"
)


def _own(owner: Claim, key: str) -> dict[str, Any]:
    return {"job": owner.job, "key": key, "run_id": owner.id, "attempt": owner.attempt}


def complete(database: Database, owner: Claim, key: str) -> bool:
    """Mark an item this attempt claimed as done; False if it is not ours any more."""
    statement = f"UPDATE {ITEMS} SET state = 'done', done_at = {database.now} WHERE {_OWN_SQL}"
    with database.transaction() as connection:
        return connection.execute(statement, _own(owner, key)).rowcount == 1


def release(database: Database, owner: Claim, key: str) -> bool:
    """Forget an item this attempt claimed but did not finish, so a retry may redo it."""
    with database.transaction() as connection:
        statement = f"DELETE FROM {ITEMS} WHERE {_OWN_SQL}"
        return connection.execute(statement, _own(owner, key)).rowcount == 1


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


# The attempt that claimed the item (`item`, the items table's alias) still holds its run.
_CLAIMER_ACTIVE = f"""EXISTS (
    SELECT 1 FROM {RUNS} AS run
    WHERE run.id = item.run_id AND run.attempt = item.attempt
      AND run.status IN ({ACTIVE_SQL}))"""
_STUCK = f"(item.state = 'claimed' AND NOT {_CLAIMER_ACTIVE})"


def unreported_stuck_on(connection: Connection) -> bool:
    """Whether an item is stuck that no `stuck_item` event tells of yet (the heartbeat
    asks, so that the alert thread need not look every minute)."""
    return bool(connection.execute(f"SELECT {unreported_stuck_query()}").scalar())


def unreported_stuck_query() -> str:
    """An EXISTS: some item is stuck and no `stuck_item` event tells of it yet."""
    reported = f"""EXISTS (
        SELECT 1 FROM {EVENTS} AS event
        WHERE event.job = item.job AND event.period = item.period
          AND event.kind = '{EventKind.STUCK_ITEM.value}'
          AND event.subject = substr(item.key, 1, 500))"""
    return f"EXISTS (SELECT 1 FROM {ITEMS} AS item WHERE {_STUCK} AND NOT {reported})"


def list_items(
    database: Database, job: str | None, *, stuck_only: bool = False, limit: int = 100
) -> list[ItemRow]:
    """A job's items (every job's for None), most recently claimed first; `stuck_only`
    keeps the stuck ones."""
    conditions = ["TRUE"]
    if job is not None:
        conditions.append("item.job = :job")
    if stuck_only:
        conditions.append(_STUCK)
    return list_items_where(database, " AND ".join(conditions), {"job": job}, limit)


def list_items_where(
    database: Database, condition: str, parameters: dict[str, Any], limit: int
) -> list[ItemRow]:
    """Items that meet the condition (SQL on `item`), most recently claimed first."""
    statement = f"""
        SELECT {_ITEM_COLUMNS}, {_CLAIMER_ACTIVE} AS in_progress FROM {ITEMS} AS item
        WHERE {condition}
        ORDER BY item.claimed_at DESC, item.job, item.key LIMIT :limit
    """
    with database.transaction() as connection:
        rows = connection.execute(statement, {**parameters, "limit": limit})
        return [ItemRow(**row._asdict()) for row in rows]


_ITEM_COLUMNS = ", ".join(
    f"item.{name}" for name in ItemRow.__dataclass_fields__ if name != "in_progress"
)


def get_item(database: Database, job: str, key: str) -> ItemRow | None:
    statement = f"""
        SELECT {_ITEM_COLUMNS}, {_CLAIMER_ACTIVE} AS in_progress FROM {ITEMS} AS item
        WHERE item.job = :job AND item.key = :key
    """
    with database.transaction() as connection:
        row = connection.execute(statement, {"job": job, "key": key}).first()
    return ItemRow(**row._asdict()) if row else None


def release_item(database: Database, job: str, key: str) -> bool:
    """Forget an item for good, unless the attempt that claimed it is still running."""
    statement = f"""
        DELETE FROM {ITEMS} WHERE job = :job AND key = :key AND NOT EXISTS (
            SELECT 1 FROM {RUNS} AS run
            WHERE run.id = {ITEMS}.run_id AND run.attempt = {ITEMS}.attempt
              AND run.status IN ({ACTIVE_SQL}))
    """
    with database.transaction() as connection:
        return connection.execute(statement, {"job": job, "key": key}).rowcount == 1


def mark_done(database: Database, job: str, key: str) -> bool:
    """Record a stuck item as done, after an operator checked that its effect happened."""
    statement = f"""
        UPDATE {ITEMS} SET state = 'done', done_at = {database.now}
        WHERE job = :job AND key = :key AND state = 'claimed' AND NOT EXISTS (
            SELECT 1 FROM {RUNS} AS run
            WHERE run.id = {ITEMS}.run_id AND run.attempt = {ITEMS}.attempt
              AND run.status IN ({ACTIVE_SQL}))
    """
    with database.transaction() as connection:
        return connection.execute(statement, {"job": job, "key": key}).rowcount == 1
