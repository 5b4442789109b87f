"""A catch-up pass on a real database leaves the live loop's periods alone."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import structlog

from scheduler.model import Claim, Entry
from scheduler.node import registration as catalog
from scheduler.node.catchup_loop import CatchUp
from scheduler.registry import Job, job
from scheduler.states import Origin, RunStatus
from scheduler.store import jobs as job_rows
from scheduler.store import periods as period_rows
from scheduler.store.database import Database
from scheduler.testing.clock import VirtualClock
from tests.integration.test_metrics import samples
from tests.sql import update

START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_catch_up_takes_only_what_the_live_loop_will_not(database: Database) -> None:
    """Periods up to the node's start are catch-up's at once; later ones stay the live
    loop's until its retries would have given up on them."""
    every_minute = job("* * * * *", name="sync")(lambda: None)
    catalog.register(database, {"sync": every_minute})
    with database.transaction() as connection:
        update(connection, "scheduler_jobs", {"name": "sync"}, first_seen=START)
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
    with database.recording() as statements:
        assert catch_up.run_pass(now + timedelta(minutes=1)) is False
    assert statements == []


def _catch_up(database: Database, jobs: dict[str, Job], claimed: list[Claim]) -> CatchUp:
    return CatchUp(database, jobs, "node-a", claimed.append, structlog.get_logger())


def test_a_new_schedule_owes_no_period_before_it_was_deployed(database: Database) -> None:
    """A job moved from second 0 to second 30 of each minute. Its watermark sits at the
    last period it ran (a job with nothing new is not re-read), so the new schedule's
    periods since then look missing; they were never owed. The old schedule's periods
    up to the change still are."""
    now = datetime.now(UTC)
    last_ran = now.replace(second=0, microsecond=0) - timedelta(minutes=1)
    old = {"sync": job("0 * * * * *", name="sync")(lambda: None)}
    catalog.register(database, old)
    with database.transaction() as connection:
        update(
            connection,
            "scheduler_jobs",
            {"name": "sync"},
            first_seen=last_ran - timedelta(hours=1),
            caught_up_to=last_ran,
        )
    period_rows.write(
        database,
        "sync",
        [Entry(last_ran, RunStatus.SUCCEEDED)],
        holder="node-old",
        lease_seconds=30,
        origin=Origin.SCHEDULE,
    )
    new = {"sync": job("30 * * * * *", name="sync")(lambda: None)}
    catalog.register(database, new)
    claimed: list[Claim] = []
    _catch_up(database, new, claimed).run_pass(datetime.now(UTC))
    assert [claim.period for claim in claimed] == [last_ran + timedelta(minutes=1)], (
        "only the old schedule's period that no node ran"
    )


def test_every_pause_while_no_node_ran_is_honoured(database: Database) -> None:
    """Paused, resumed, paused and resumed again, all while no node was running: the
    periods of both pauses are skipped, not just those of the latest. SQLite's clock is
    this host's, so there the seconds pass on a virtual clock (`scheduler.testing`)
    instead of in sleeps; PostgreSQL's are real."""
    clock = None if database.server_clock else VirtualClock(datetime.now(UTC))
    if clock is not None:
        database = replace(database, time_source=clock)

    def wait(seconds: float) -> None:
        if clock is None:
            time.sleep(seconds)
        else:
            clock.set(clock.now + timedelta(seconds=seconds))

    every_second = {"sync": job("* * * * * *", name="sync")(lambda: None)}
    catalog.register(database, every_second)
    windows = []
    for _ in range(2):
        assert job_rows.set_paused(database, "sync", paused=True)
        paused_at = database.read_clock()
        wait(1.5)
        assert job_rows.set_paused(database, "sync", paused=False)
        windows.append((paused_at, database.read_clock()))
        wait(1.5)
    claimed: list[Claim] = []
    _catch_up(database, every_second, claimed).run_pass(database.time_source.wall())
    inside = [
        claim.period for claim in claimed for start, end in windows if start <= claim.period < end
    ]
    assert claimed, "the periods between the pauses run"
    assert inside == [], "a period of an earlier pause was run"


def test_a_catch_up_pass_counts_its_claims_in_the_metrics(database: Database) -> None:
    """`scheduler_catchup_claims_total` and `scheduler_claims_total{result="won"}` count
    what catch-up claimed, as they count the live loop's claims (a node that started a
    second after its job was registered claimed that second through catch-up, and the
    metrics said nothing of it)."""
    every_minute = job("* * * * *", name="counted")(lambda: None)
    catalog.register(database, {"counted": every_minute})
    with database.transaction() as connection:
        update(connection, "scheduler_jobs", {"name": "counted"}, first_seen=START)
    before = samples()
    claimed: list[Claim] = []
    catch_up = _catch_up(database, {"counted": every_minute}, claimed)
    catch_up.run_pass(START + timedelta(minutes=5, seconds=30))
    after = samples()
    assert len(claimed) == 5
    caught = ("scheduler_catchup_claims_total", (("job", "counted"),))
    assert after[caught] - before.get(caught, 0) == 5
    won = ("scheduler_claims_total", (("result", "won"),))
    assert after[won] - before.get(won, 0) == 5
