"""A catch-up budget on a real database: one catch-up run per pace, the rest deferred,
recorded, alerted once, and run or skipped only at an operator's word."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import pytest
import structlog

from scheduler import check
from scheduler.admin import Admin
from scheduler.errors import UserError
from scheduler.model import Claim
from scheduler.node import registration as catalog
from scheduler.node.catchup_loop import CatchUp
from scheduler.policy import CatchupBudget
from scheduler.registry import Job, job
from scheduler.states import EventKind, Origin, Reason, RunStatus
from scheduler.store import deferred as deferred_rows
from scheduler.store import queries
from scheduler.store.database import Database
from tests.sql import rows, update

MISSED = 10  # minutes the fleet was down


def _budgeted(database: Database) -> tuple[Job, list[datetime]]:
    """An every-minute job with a budget of 3 an hour (one start each 20 minutes),
    first seen 10 minutes ago and never run since: 10 periods owed."""
    budgeted = job("* * * * *", name="spend", catchup_budget="3/1h")(lambda: None)
    catalog.register(database, {"spend": budgeted})
    now = queries.clock(database)
    owed = [
        now.replace(second=0, microsecond=0) - timedelta(minutes=m)
        for m in range(MISSED - 1, -1, -1)
    ]
    with database.transaction() as connection:
        update(
            connection,
            "scheduler_jobs",
            {"name": "spend"},
            first_seen=owed[0] - timedelta(seconds=30),
        )
    return budgeted, owed


def _node(database: Database, jobs: dict[str, Job], claimed: list[Claim], name: str) -> CatchUp:
    """A node's catch-up that started now: later periods are its live loop's, whatever
    minute the test reaches."""
    return CatchUp(
        database,
        jobs,
        name,
        claimed.append,
        structlog.get_logger(),
        live_since=queries.clock(database),
        live_retry=timedelta(hours=1),
    )


def _runs(database: Database) -> dict[object, tuple[str, str | None]]:
    return {
        row["period"]: (row["status"], row["reason"])
        for row in rows(database, "scheduler_runs", order_by="period", job="spend")
    }


def test_a_budget_starts_one_run_per_pace_and_defers_what_it_cannot_afford(
    database: Database,
) -> None:
    budgeted, owed = _budgeted(database)
    claimed: list[Claim] = []
    node = _node(database, {"spend": budgeted}, claimed, "node-a")

    node.run_pass(queries.clock(database))
    assert [claim.period for claim in claimed] == owed[:1], "the oldest, at once"
    assert {claim.origin for claim in claimed} == {Origin.CATCHUP}
    runs = _runs(database)
    deferred = [period for period, (status, _) in runs.items() if status == RunStatus.DEFERRED]
    assert deferred == owed[3:], "past the budget of 3: recorded deferred"
    assert {runs[period] for period in deferred} == {(RunStatus.DEFERRED, Reason.BUDGET)}
    assert owed[1] not in runs, "within the budget: waiting"
    assert owed[2] not in runs, "within the budget: waiting"
    assert node.next_start is not None

    # The next pass keeps the pace: nothing new starts 20 minutes before its time.
    claimed.clear()
    node.run_pass(queries.clock(database))
    assert claimed == []
    assert owed[1] not in _runs(database), "still owed, not lost: the watermark waits"

    # 20 minutes later (the first start moved back by as much): the next one starts.
    earlier = queries.clock(database) - timedelta(minutes=21)
    with database.transaction() as connection:
        update(
            connection, "scheduler_runs", {"job": "spend", "period": owed[0]}, claimed_at=earlier
        )
    node.run_pass(queries.clock(database))
    assert [claim.period for claim in claimed] == owed[1:2]

    events = rows(database, "scheduler_events", job="spend", kind=EventKind.DEFERRED.value)
    assert len(events) == 1, "one event for the write, not one per period"
    assert events[0]["detail"].startswith("7 period(s) deferred (budget)")
    assert "scheduler deferred run spend" in events[0]["detail"]


def test_deferred_periods_run_or_skip_at_an_operators_word_each_once(
    database: Database,
) -> None:
    budgeted, owed = _budgeted(database)
    first: list[Claim] = []
    node = _node(database, {"spend": budgeted}, first, "node-a")
    node.run_pass(queries.clock(database))
    admin = Admin(database)
    [listed] = admin.deferred()
    assert (listed.job, listed.waiting, listed.approved) == ("spend", 7, 0)
    report = check.gather(database)
    [finding] = [f for f in report.findings if f.problem is check.Problem.DEFERRED]
    assert finding.job == "spend"
    assert "7 period(s) deferred" in finding.detail

    assert admin.run_deferred("spend", oldest=4) == 4
    # Two nodes' passes hear of it at once: each period is claimed by one of them.
    second: list[Claim] = []
    other = _node(database, {"spend": budgeted}, second, "node-b")
    first.clear()
    node.look_for_deferred = True
    other.run_pass(queries.clock(database))
    node.run_pass(queries.clock(database))
    approved = sorted(claim.period for claim in first + second)
    assert approved == owed[3:7], "the oldest four, once each"
    assert {claim.origin for claim in first + second} == {Origin.MANUAL}, "outside the budget"
    assert owed[1] not in _runs(database), "the budget's own still wait their turn"
    taken = [
        row
        for row in rows(database, "scheduler_runs", job="spend", status=RunStatus.CLAIMED.value)
        if row["period"] in approved
    ]
    assert len(taken) == 4
    assert {float(row["lease_seconds"]) for row in taken} == {30.0}, "the job's lease"
    assert all(row["lease_expires_at"] > queries.clock(database) for row in taken)
    assert {row["finished_at"] for row in taken} == {None}
    assert admin.run_deferred("spend", oldest=1) == 1
    assert admin.skip_deferred("spend") == 3, "the rest, the approved one not yet claimed too"
    runs = _runs(database)
    assert [runs[period] for period in owed[7:]] == [(RunStatus.SKIPPED, Reason.BUDGET)] * 3
    assert admin.deferred() == []
    report = check.gather(database)
    assert [f for f in report.findings if f.problem is check.Problem.DEFERRED] == []


def test_an_operators_answer_names_the_job_and_the_field(database: Database) -> None:
    admin = Admin(database)
    for action in (admin.run_deferred, admin.skip_deferred, admin.deferred):
        with pytest.raises(UserError, match="job 'nobody': name: unknown"):
            action("nobody")
    _budgeted(database)
    with pytest.raises(UserError, match="job 'spend': oldest: must be a whole number ≥ 1"):
        admin.run_deferred("spend", oldest=0)


def test_two_nodes_passing_at_once_spend_the_budget_once(database: Database) -> None:
    """Their passes decide under the job's lock, each on what the other wrote: one
    start, and the same periods deferred as by one node (none of the budget's own)."""
    budgeted, owed = _budgeted(database)
    claimed: list[Claim] = []
    nodes = [_node(database, {"spend": budgeted}, claimed, name) for name in ("a", "b")]
    gate = threading.Barrier(2)

    def pass_of(node: CatchUp) -> None:
        gate.wait()
        node.run_pass(queries.clock(database))

    threads = [threading.Thread(target=pass_of, args=(node,)) for node in nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [claim.period for claim in claimed] == owed[:1]
    runs = _runs(database)
    assert [period for period, (status, _) in runs.items() if status == RunStatus.DEFERRED] == (
        owed[3:]
    )
    assert owed[1] not in runs
    assert owed[2] not in runs


def test_approved_periods_beyond_a_pass_are_claimed_by_the_next_at_once(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass claims at most CLAIMS_PER_PASS approved periods of a job (2 here), and
    says more are left, so that the loop goes round again without waiting."""
    monkeypatch.setattr(deferred_rows, "CLAIMS_PER_PASS", 2)
    budgeted, owed = _budgeted(database)
    claimed: list[Claim] = []
    node = _node(database, {"spend": budgeted}, claimed, "node-a")
    node.run_pass(queries.clock(database))
    assert Admin(database).run_deferred("spend", oldest=5) == 5
    claimed.clear()
    node.look_for_deferred = True
    assert node.run_pass(queries.clock(database)) is True, "more are left"
    assert [claim.period for claim in claimed] == owed[3:5]
    assert node.run_pass(queries.clock(database)) is True
    assert node.run_pass(queries.clock(database)) is False
    assert sorted(claim.period for claim in claimed) == owed[3:8]


def test_a_fleet_budget_is_spent_across_jobs(database: Database) -> None:
    """`--catchup-budget 3/1h` and no job budget: two jobs owe 10 periods each; one
    catch-up run starts for both together, and between them no more than three are
    kept to start; the rest are deferred."""
    jobs = {name: job("* * * * *", name=name)(lambda: None) for name in ("north", "south")}
    catalog.register(database, jobs)
    now = queries.clock(database)
    first = now.replace(second=0, microsecond=0) - timedelta(minutes=MISSED - 1)
    with database.transaction() as connection:
        for name in jobs:
            update(
                connection,
                "scheduler_jobs",
                {"name": name},
                first_seen=first - timedelta(seconds=30),
            )
    claimed: list[Claim] = []
    node = CatchUp(
        database,
        jobs,
        "node-a",
        claimed.append,
        structlog.get_logger(),
        live_since=queries.clock(database),
        live_retry=timedelta(hours=1),
        fleet_budget=CatchupBudget(3, timedelta(hours=1)),  # one each 20 minutes
    )
    node.run_pass(queries.clock(database))
    assert len(claimed) == 1, "one start for the fleet, not one a job"
    # The pace passes (every claim so far moved to 21 minutes ago, well within the
    # hour): the jobs' waiting periods compete for what is left; in the end three
    # started, the rest deferred.
    for _ in range(4):
        earlier = queries.clock(database) - timedelta(minutes=21)
        with database.transaction() as connection:
            for claim in claimed:
                update(connection, "scheduler_runs", {"id": claim.id}, claimed_at=earlier)
        node.run_pass(queries.clock(database))
    assert len(claimed) == 3
    statuses = [
        row["status"] for name in jobs for row in rows(database, "scheduler_runs", job=name)
    ]
    assert len(statuses) == 2 * MISSED, "every owed period has a row: none lost"
    assert statuses.count("deferred") == 2 * MISSED - len(claimed)
