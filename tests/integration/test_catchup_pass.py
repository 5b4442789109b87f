"""A catch-up pass on a real database leaves the live loop's periods alone."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import structlog
from sqlalchemy import event, update

from scheduler import catalog
from scheduler.backlog import CatchUp
from scheduler.registry import job
from scheduler.states import Origin
from scheduler.store.database import Database
from scheduler.store.runs import Claim
from scheduler.store.schema import jobs as jobs_table

START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_catch_up_takes_only_what_the_live_loop_will_not(database: Database) -> None:
    """Periods up to the node's start are catch-up's at once; later ones stay the live
    loop's until its retries would have given up on them."""
    every_minute = job("* * * * *", name="sync")(lambda: None)
    catalog.register(database, {"sync": every_minute})
    with database.transaction() as connection:
        connection.execute(
            update(jobs_table).where(jobs_table.c.name == "sync").values(first_seen=START)
        )
    claimed: list[Claim] = []
    live_since = START + timedelta(minutes=10, seconds=30)
    catch_up = CatchUp(
        database,
        {"sync": every_minute},
        "node-a",
        claimed.append,
        structlog.get_logger(),
        live_since=live_since,
        live_retry=timedelta(minutes=5),
    )

    catch_up.run_pass(START + timedelta(minutes=12))
    assert [claim.period for claim in claimed] == [
        START + timedelta(minutes=m) for m in range(1, 11)
    ], "the periods before the node started, and none after"
    assert {claim.origin for claim in claimed} == {Origin.CATCHUP}

    claimed.clear()
    catch_up.run_pass(START + timedelta(minutes=14))
    assert claimed == [], "11:00 to 14:00 are still the live loop's to claim"

    catch_up.run_pass(START + timedelta(minutes=17))
    assert [claim.period for claim in claimed] == [
        START + timedelta(minutes=m) for m in (11, 12)
    ], "given up by the live loop after five minutes: catch-up takes them"


def test_a_pass_over_jobs_with_nothing_new_sends_no_statement(database: Database) -> None:
    yearly = {f"y{n}": job("0 0 1 1 *", name=f"y{n}")(lambda: None) for n in range(50)}
    catalog.register(database, yearly)
    catch_up = CatchUp(database, yearly, "node-a", lambda _: None, structlog.get_logger())
    now = datetime.now(UTC)
    catch_up.run_pass(now)  # reads every row once and remembers each next period
    statements: list[str] = []
    event.listen(database.engine, "before_cursor_execute", _record_into(statements))
    assert catch_up.run_pass(now + timedelta(minutes=1)) is False
    assert statements == []


def _record_into(statements: list[str]) -> Callable[..., None]:
    def record(_connection: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    return record
