"""A catch-up budget over schedules created at run time, on real databases: the oldest
late period starts at once, those within the budget wait their pace as `deferred
(paced)` rows that any node's catch-up claims once each, the rest wait for an operator;
live periods stay live; a deleted schedule's waiting periods never run."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import datetime, timedelta
from itertools import pairwise

import structlog

from scheduler import RunContext, check
from scheduler.admin import Admin
from scheduler.model import Claim
from scheduler.node.catchup_loop import CatchUp
from scheduler.node.registration import register
from scheduler.node.schedule_loop import PassBudgets
from scheduler.policy import CatchupBudget
from scheduler.registry import Job, job
from scheduler.run.job_table import JobTable
from scheduler.schedules import Schedules
from scheduler.states import Origin, Reason
from scheduler.store import schedules as stored
from scheduler.store.database import Database
from tests.sql import rows
from tests.waiting import wait_until

PACE = timedelta(seconds=2)


def _report(ctx: RunContext, tenant: int) -> None:
    del ctx, tenant


BUDGETED = job(cron=None, name="tenant_budgeted", catchup_budget="3/6s")(_report)
FREE = job(cron=None, name="tenant_free")(_report)
JOBS: dict[str, Job] = {"tenant_budgeted": BUDGETED, "tenant_free": FREE}


def _now(database: Database) -> datetime:
    with database.transaction() as connection:
        return stored.clock(connection)


def _owing(database: Database, key: str, template: str = "tenant_budgeted") -> list[datetime]:
    """A schedule every minute whose periods of the last ten minutes no node fired (as
    after an outage): its periods from then to now, oldest first. Begun at least 3 s
    from a minute's turn: a period a minute old is late to the pass by LATE_AFTER, and
    the test's clock read and the pass's must agree on which side of it each one is."""
    register(database, JOBS)
    now = _now(database)
    if not 3 <= now.second < 50:
        time.sleep((63 - now.second) % 60 - now.microsecond / 1e6)
        now = _now(database)
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=10)
    Schedules(database).create(key, template, every=60, start=start, args={"tenant": 1})
    with database.transaction() as connection:
        connection.execute(
            "UPDATE scheduler_schedules SET next_due_at = :start WHERE key = :key",
            {"start": start, "key": key},
        )
    return [start + timedelta(minutes=n) for n in range(11) if start + timedelta(minutes=n) <= now]


def _pass(database: Database, fleet: CatchupBudget | None = None) -> stored.Pass:
    table, budgets = JobTable(JOBS, database), PassBudgets(database, fleet)
    return stored.fire(
        database,
        "node-a",
        list(JOBS),
        lambda row, now, connection: budgets.plan(table, row, now, connection),
    )


def _catch_up(database: Database, claimed: list[Claim], name: str) -> CatchUp:
    return CatchUp(database, JobTable(JOBS, database), name, claimed.append, structlog.get_logger())


def _rows(database: Database, key: str) -> dict[datetime, tuple[str, str | None, str]]:
    return {
        row["period"]: (row["status"], row["reason"], row["origin"])
        for row in rows(database, "scheduler_runs", order_by="period", job="@" + key)
    }


def test_a_schedules_late_periods_start_at_the_budgets_pace_each_once_across_nodes(
    database: Database,
) -> None:
    owed = _owing(database, "t1")
    late = [period for period in owed if _now(database) - period > timedelta(seconds=61)]
    done = _pass(database)
    runs = _rows(database, "t1")
    assert runs[late[0]] == ("claimed", None, "catchup"), "the oldest starts at once"
    assert [runs[p][:2] for p in late[1:3]] == [("deferred", "paced")] * 2
    assert {runs[p][:2] for p in late[3:]} == {("deferred", "budget")}
    live = [p for p in owed if p not in late]
    assert live
    assert all(runs[p] == ("claimed", None, "schedule") for p in live), (
        "live periods are not held behind the catch-up"
    )
    assert [claim.period for claim in done.result.won] == [late[0], *live]

    # Two nodes' catch-up loops pass at once, again and again: each waiting period is
    # claimed by one of them, oldest first, one per pace.
    claimed: list[Claim] = []
    nodes = [_catch_up(database, claimed, f"node-{n}") for n in "ab"]
    stop = threading.Event()

    def passes(node: CatchUp) -> None:
        while not stop.is_set():
            node.run_pass(_now(database))
            time.sleep(0.05)

    threads = [threading.Thread(target=passes, args=(node,)) for node in nodes]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: len(claimed) >= 2, timeout=20)
        time.sleep(2 * PACE.total_seconds())  # time enough for a wrong third
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert [claim.period for claim in claimed] == late[1:3]
    assert {claim.origin for claim in claimed} == {Origin.CATCHUP}
    runs = _rows(database, "t1")
    starts = sorted(
        row["claimed_at"]
        for row in rows(database, "scheduler_runs", job="@t1")
        if row["origin"] == "catchup" and row["status"] == "claimed"
    )
    assert len(starts) == 3
    assert all(b - a >= PACE - timedelta(milliseconds=50) for a, b in pairwise(starts))
    assert {runs[p][:2] for p in late[3:]} == {("deferred", "budget")}, "for an operator"

    # The operator's word reaches a schedule's deferred periods as a job's.
    admin = Admin(database)
    [listed] = admin.deferred("@t1")
    assert (listed.waiting, listed.approved, listed.paced) == (len(late) - 3, 0, 0)
    [finding] = [f for f in check.gather(database).findings if f.problem is check.Problem.DEFERRED]
    assert finding.job == "@t1"
    assert "scheduler deferred run @t1" in finding.detail
    assert admin.run_deferred("@t1") == len(late) - 3
    claimed.clear()
    nodes[0].look_for_deferred = True
    nodes[0].run_pass(_now(database))
    assert sorted(claim.period for claim in claimed) == late[3:]
    assert {claim.origin for claim in claimed} == {Origin.MANUAL}
    statuses = Counter(status for status, _, _ in _rows(database, "t1").values())
    assert statuses == Counter({"claimed": len(owed)}), "every period once, none lost"


def test_a_deleted_schedules_waiting_periods_never_run(database: Database) -> None:
    """Its deletion records every period it still had deferred (waiting its pace, past
    its budget, approved) skipped as it commits: none runs after it, none is left for
    `check` or an operator."""
    owed = _owing(database, "t2")
    _pass(database)
    before = _rows(database, "t2")
    deferred = [p for p, (status, _, _) in before.items() if status == "deferred"]
    assert {before[p][1] for p in deferred} == {"paced", "budget"}
    assert Admin(database).run_deferred("@t2", oldest=1) == 1  # one approved as well
    assert Schedules(database).delete("t2")
    runs = _rows(database, "t2")
    assert [runs[p][:2] for p in deferred] == [("skipped", Reason.CATCHUP.value)] * len(deferred)
    claimed: list[Claim] = []
    node = _catch_up(database, claimed, "node-a")
    time.sleep(PACE.total_seconds() + 0.2)
    node.look_for_deferred = True
    node.run_pass(_now(database))
    assert claimed == []
    assert node.next_start is None, "nothing waits any more"
    assert len(_rows(database, "t2")) == len(owed)
    assert not [f for f in check.gather(database).findings if f.problem is check.Problem.DEFERRED]


def test_a_fleet_budget_is_shared_by_schedules_without_one_of_their_own(
    database: Database,
) -> None:
    """Two schedules of a template with no budget, behind a fleet budget of 3 an hour:
    three catch-up starts in all (one now, two paced), whichever schedule they are of."""
    _owing(database, "f1", "tenant_free")
    _owing(database, "f2", "tenant_free")
    fleet = CatchupBudget(3, timedelta(hours=1))
    _pass(database, fleet)
    reasons = Counter(
        (row["status"], row["reason"], row["origin"])
        for row in rows(database, "scheduler_runs")
        if row["job"] in ("@f1", "@f2")
    )
    assert reasons[("claimed", None, "catchup")] == 1
    assert reasons[("deferred", "paced", "catchup")] == 2
    assert reasons[("deferred", "budget", "catchup")] > 0
