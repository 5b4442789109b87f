"""A catch-up budget with real nodes: after an outage an every-second job starts three
catch-up runs, one each 3 s, whichever node is alive; the other periods it owed are
deferred, run by no node (one of them killed meanwhile), lost by none; the oldest two
are skipped for good and the others each run once when an operator says so."""

from __future__ import annotations

import itertools
import json
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from scheduler.states import EventKind, Origin, Reason, RunStatus
from scheduler.store.database import open_database
from tests.acceptance.processes import Node, run_command, start_node
from tests.acceptance.records import missing_seconds, run_rows, unfired_schedule
from tests.sql import rows

pytestmark = pytest.mark.slow
PACE = timedelta(seconds=3)


def _nodes(
    tmp_path: Path, url: str, names: list[str], log: Path, jobs: str = "budgeted", **env: str
) -> list[Node]:
    # PostgreSQL tells the nodes of an operator's answer at once; SQLite's look every
    # catch-up interval (a minute by default), shortened here.
    polling = {} if url.startswith("postgresql") else {"SCHEDULER_CATCHUP_INTERVAL": "5s"}
    nodes = [
        start_node(tmp_path, name, url, jobs, EXECUTION_LOG=str(log), **polling, **env)
        for name in names
    ]
    for node in nodes:
        node.wait_for(lambda event: event.get("event") == "node_started")
    return nodes


def _first_to(nodes: list[Node], event_name: str, timeout: float = 30) -> Node:
    """The first of the nodes to log `event_name`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for node in nodes:
            if any(event.get("event") == event_name for event in node.events()):
                return node
        time.sleep(0.05)
    raise AssertionError(f"no node logged {event_name} in {timeout}s")


def _until_started(rows: Callable[[], list[dict[str, Any]]], count: int) -> None:
    """Wait (up to 40 s) until `count` of these catch-up rows were started."""
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        if sum(row["status"] != RunStatus.DEFERRED for row in rows()) >= count:
            return
        time.sleep(0.2)


def _last_period(url: str, job: str) -> datetime:
    """The newest period of the job that has a row (or, with none, when the job was
    first seen): every period after it is owed."""
    periods: list[datetime] = [row["period"] for row in run_rows(url, job)]
    if periods:
        return max(periods)
    database = open_database(url)
    try:
        [registered] = rows(database, "scheduler_jobs", name=job)
    finally:
        database.dispose()
    first_seen: datetime = registered["first_seen"]
    return first_seen


def _executions(log: Path) -> Counter[str]:
    return Counter(line.split()[0] for line in log.read_text().splitlines())


def _events(url: str) -> list[dict[str, object]]:
    database = open_database(url)
    try:
        return rows(database, "scheduler_events", job="budgeted", kind=EventKind.DEFERRED.value)
    finally:
        database.dispose()


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_an_outage_starts_the_budget_paced_and_defers_the_rest_until_an_operator_says(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("postgres_url" if backend == "postgres" else "sqlite_url")
    names = ["a", "b"] if backend == "postgres" else ["a"]
    log = tmp_path / "executions.txt"
    first = _nodes(tmp_path, url, names, log)
    time.sleep(1.5)  # each node ran for 1.5 s at least (they started together)
    for node in first:
        assert node.stop() == 0
    # The newest period with a row: every later one is owed (the clock taken after the
    # stop can already be past the first owed period, which would leave it out).
    down = _last_period(url, "budgeted")
    # Ten periods owed at least (eleven or more once the nodes have started again): three
    # start, seven or more are deferred.
    time.sleep(10)
    nodes = _nodes(tmp_path, url, names, log)
    pacer = _first_to(nodes, "catchup_claimed")
    if len(nodes) > 1:
        # The node that started the first dies with the budget a third spent: the
        # other keeps the pace, and loses nothing.
        time.sleep(1)
        pacer.kill()
        nodes.remove(pacer)

    def catch_up_rows() -> list[dict[str, Any]]:
        return [
            row
            for row in run_rows(url, "budgeted")
            if row["origin"] == Origin.CATCHUP and row["period"] > down
        ]

    # The three starts come 0, 3 and 6 s apart, later on a loaded machine: wait for the
    # third (the rest were deferred at once, so a fourth could only be a wrong one), and
    # a pace more for a wrong fourth.
    _until_started(catch_up_rows, 3)
    time.sleep(PACE.total_seconds() + 1)
    catch_up = catch_up_rows()
    started = [row for row in catch_up if row["status"] != RunStatus.DEFERRED]
    deferred = [row for row in catch_up if row["status"] == RunStatus.DEFERRED]
    assert len(started) == 3, [
        (row["period"], row["status"], row["claimed_at"]) for row in catch_up
    ]
    assert len(deferred) >= 6
    assert {row["reason"] for row in deferred} == {Reason.BUDGET}
    assert max(row["period"] for row in started) < min(row["period"] for row in deferred), (
        "the oldest start, the newest wait"
    )
    claims = sorted(row["claimed_at"] for row in started)
    gaps = [later - earlier for earlier, later in itertools.pairwise(claims)]
    assert all(gap >= PACE - timedelta(milliseconds=100) for gap in gaps), gaps
    ran = _executions(log)
    assert not {row["period"].isoformat() for row in deferred} & set(ran), "a deferred one ran"
    assert len(_events(url)) >= 1

    check = run_command(["check", "--database-url", url], tmp_path)
    assert check.returncode == 1
    assert f"{len(deferred)} period(s) deferred by the catch-up budget" in check.stdout

    listed = run_command(["deferred", "list", "--json", "--database-url", url], tmp_path)
    assert listed.returncode == 0, listed.stderr
    [entry] = json.loads(listed.stdout)
    assert (entry["job"], entry["waiting"], entry["approved"], entry["paced"]) == (
        "budgeted",
        len(deferred),
        0,
        0,
    )
    table = run_command(["deferred", "list", "budgeted", "--database-url", url], tmp_path)
    assert table.stdout.splitlines()[0].split() == [
        "JOB",
        "WAITING",
        "APPROVED",
        "PACED",
        "OLDEST",
        "NEWEST",
    ]
    unknown = run_command(["deferred", "skip", "nobody", "--database-url", url], tmp_path)
    assert unknown.returncode != 0
    assert "job 'nobody': name: unknown" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    # The operator skips the oldest two for good, and runs the rest.
    skip = ["deferred", "skip", "budgeted", "--oldest", "2", "--database-url", url]
    skipped = run_command(skip, tmp_path)
    assert skipped.returncode == 0, skipped.stderr
    assert "job budgeted: 2 deferred period(s) skipped" in skipped.stdout
    dropped = {row["period"] for row in deferred[:2]}
    assert {
        row["period"]: (row["status"], row["reason"])
        for row in run_rows(url, "budgeted")
        if row["period"] in dropped
    } == dict.fromkeys(dropped, (RunStatus.SKIPPED, Reason.BUDGET))
    answered = run_command(["deferred", "run", "budgeted", "--database-url", url], tmp_path)
    assert answered.returncode == 0, answered.stderr
    assert f"{len(deferred) - 2} deferred period(s) approved" in answered.stdout
    waiting = {row["period"] for row in deferred[2:]}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done = {
            row["period"]
            for row in run_rows(url, "budgeted")
            if row["period"] in waiting and row["status"] == RunStatus.SUCCEEDED
        }
        if done == waiting:
            break
        time.sleep(0.2)
    for node in nodes:
        assert node.stop() == 0
    final = run_rows(url, "budgeted")
    assert {row["period"] for row in final if row["status"] == RunStatus.SUCCEEDED} >= waiting
    assert {row["origin"] for row in final if row["period"] in waiting} == {Origin.MANUAL}
    assert missing_seconds([row["period"] for row in final]) == [], "a period was lost"
    ran = _executions(log)
    assert [period for period, count in ran.items() if count > 1] == [], "a period ran twice"
    assert all(period.isoformat() in ran for period in waiting)
    assert not {period.isoformat() for period in dropped} & set(ran), "a skipped one ran"
    assert {(row["status"], row["reason"]) for row in final if row["period"] in dropped} == {
        (RunStatus.SKIPPED, Reason.BUDGET)
    }
    assert down < min(waiting)


def test_a_fleets_budget_is_kept_by_every_node_across_jobs(
    tmp_path: Path, postgres_url: str
) -> None:
    """Three nodes with `--catchup-budget 3/9s`, two every-second jobs without budgets
    of their own: after an outage, three catch-up runs start in all, 3 s apart, and
    every other period the two jobs owed is deferred, none lost."""
    log = tmp_path / "executions.txt"
    fleet = {"SCHEDULER_CATCHUP_BUDGET": "3/9s"}
    for node in _nodes(tmp_path, postgres_url, ["a", "b", "c"], log, "fleet_budgeted", **fleet):
        assert node.stop() == 0
    down = {name: _last_period(postgres_url, name) for name in ("fleet-north", "fleet-south")}
    # Longer than the budget's window (9 s): a catch-up run the first nodes claimed as
    # they started (the second after registering, before they were stopped) no longer
    # counts against it once the new nodes have started.
    time.sleep(10)
    nodes = _nodes(tmp_path, postgres_url, ["a", "b", "c"], log, "fleet_budgeted", **fleet)

    def caught_since_down() -> list[dict[str, Any]]:
        return [
            row
            for name in ("fleet-north", "fleet-south")
            for row in run_rows(postgres_url, name)
            if row["period"] > down[name] and row["origin"] == Origin.CATCHUP
        ]

    # The third start is due 6 s after the first; a loaded machine may start it later,
    # so wait for it. The rest were deferred at once, so no fourth can follow.
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        if sum(row["status"] != RunStatus.DEFERRED for row in caught_since_down()) >= 3:
            break
        time.sleep(0.2)
    for node in nodes:
        assert node.stop() == 0
    rows_of = {
        name: [row for row in run_rows(postgres_url, name) if row["period"] > down[name]]
        for name in ("fleet-north", "fleet-south")
    }
    caught = caught_since_down()
    started = sorted(
        (row for row in caught if row["status"] != RunStatus.DEFERRED),
        key=lambda row: row["claimed_at"],
    )
    seen = [(row["job"], row["period"], row["status"], row["claimed_at"]) for row in caught]
    assert len(started) == 3, seen
    # Every catch-up start of the test, the first nodes' too, keeps the fleet's pace.
    every = sorted(
        row["claimed_at"]
        for name in rows_of
        for row in run_rows(postgres_url, name)
        if row["origin"] == Origin.CATCHUP
        and row["status"] not in (RunStatus.DEFERRED, RunStatus.SKIPPED, RunStatus.MISSED)
    )
    gaps = [later - earlier for earlier, later in itertools.pairwise(every)]
    assert all(gap >= PACE - timedelta(milliseconds=100) for gap in gaps), gaps
    assert len(caught) - len(started) >= 12, "the rest of both jobs' owed periods deferred"
    for name, found in rows_of.items():
        assert missing_seconds([row["period"] for row in found]) == [], name
    ran = Counter((words[0], words[-1]) for words in map(str.split, log.read_text().splitlines()))
    assert [key for key, count in ran.items() if count > 1] == [], "a period ran twice"
    deferred = {
        (row["period"].isoformat(), row["job"])
        for row in caught
        if row["status"] == RunStatus.DEFERRED
    }
    assert not deferred & set(ran), "a deferred period ran"


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_a_schedules_outage_is_paced_by_its_templates_budget_across_nodes(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """A schedule created at run time (every second) that no node fired for 75 s: its
    template's budget of 3 per 9 s starts 3 of the 15 late periods, 3 s apart, whichever
    node is alive (on PostgreSQL the node that wrote the waiting ones is killed); the
    other 12 wait for an operator; the periods of the last minute run live, at once, not
    behind the catch-up; none runs twice, none is lost."""
    url = request.getfixturevalue("postgres_url" if backend == "postgres" else "sqlite_url")
    names = ["a", "b"] if backend == "postgres" else ["a"]
    log = tmp_path / "executions.txt"
    for node in _nodes(tmp_path, url, names[:1], log):
        assert node.stop() == 0  # the schema and the template registered
    down = unfired_schedule(url, "t-1", "tenant_budgeted", 75)
    nodes = _nodes(tmp_path, url, names, log)
    writer = _first_to(nodes, "periods_paced")
    killed = None
    if len(nodes) > 1:
        # The node that wrote the paced periods dies before their turn: the other,
        # told by the pass's notification, starts them at their pace.
        writer.kill()
        nodes.remove(writer)
        killed = writer.name
    # The three starts (0, 3 and 6 s), later on a loaded machine, and a pace more.
    _until_started(
        lambda: [
            row
            for row in run_rows(url, "@t-1")
            if row["period"] >= down and row["origin"] == Origin.CATCHUP
        ],
        3,
    )
    time.sleep(PACE.total_seconds() + 1)

    runs = [row for row in run_rows(url, "@t-1") if row["period"] >= down]
    catch_up = [row for row in runs if row["origin"] == Origin.CATCHUP]
    started = sorted(
        (row for row in catch_up if row["status"] != RunStatus.DEFERRED),
        key=lambda row: row["period"],
    )
    waiting = [row for row in catch_up if row["status"] == RunStatus.DEFERRED]
    assert len(started) == 3, [(row["period"], row["status"], row["reason"]) for row in runs]
    assert {row["reason"] for row in waiting} == {Reason.BUDGET}, "none left waiting its pace"
    assert len(started) + len(waiting) >= 14
    assert started[0]["period"] == down, "the oldest first"
    assert max(row["period"] for row in started) < min(row["period"] for row in waiting)
    # One start per pace (a run taken over from the killed node counts from its new
    # claim, so only the paced ones are measured then).
    claims = sorted(row["claimed_at"] for row in (started[1:] if killed else started))
    assert all(b - a >= PACE - timedelta(milliseconds=100) for a, b in itertools.pairwise(claims))
    live = [row for row in runs if row["origin"] == Origin.SCHEDULE]
    assert len(live) >= 55, "the last minute's periods ran live"
    assert min(row["claimed_at"] for row in live) < claims[-1], "not behind the catch-up"
    # Each period's body ran once, but for a run the killed node was in (at least once
    # across a crash: its next attempt ran elsewhere).
    ran: dict[str, list[str]] = {}
    for line in log.read_text().splitlines():
        if line.endswith("@t-1"):
            period, holder, *_ = line.split()
            ran.setdefault(period, []).append(holder)
    for period, on in ran.items():
        assert all(killed and one.startswith(f"{killed}-") for one in on[:-1]), (period, on)
    assert len(ran) >= len(live) - 2 + 3
    for node in nodes:
        assert node.stop() == 0
