"""A concurrency pool with real nodes, one of them SIGKILLed mid-run: never more runs of
the pool's members at once than its limit, nor of one key than its cap; the key that
asks for more waits (`run_waiting`) while the others run on time; and no period is
lost, the killed node's included."""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from scheduler.errors import ScheduleDefinitionError
from scheduler.policy import Pool
from scheduler.schedules import Schedules
from scheduler.states import RunStatus
from scheduler.store import concurrency
from scheduler.store.database import open_database
from tests.acceptance.jobmods.pooled_tenants import tenant_sync
from tests.acceptance.processes import Node, run_command, start_node
from tests.acceptance.records import notes, run_rows

pytestmark = pytest.mark.slow
JOBS = ("a-1", "a-2", "b-1", "c-1")
LIMIT, PER_KEY = 3, 1


def _command(args: list[str], url: str, cwd: Path) -> str:
    done = run_command([*args, "--database-url", url], cwd)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _started(nodes: list[Node]) -> None:
    for node in nodes:
        node.wait_for(lambda event: event.get("event") == "node_started")


def _bodies(log: Path, killed: str, killed_at: float) -> list[tuple[float, float, str]]:
    """(began, ended, job) of every body noted; one whose node was killed ended then."""
    began: dict[tuple[str, str, str, str], float] = {}
    ended: dict[tuple[str, str, str, str], float] = {}
    for words in notes(log):
        period, node, attempt, what, job = words
        kind, moment = what.split("@")
        (began if kind == "start" else ended)[(period, node, attempt, job)] = float(moment)
    bodies = []
    for key, start in began.items():
        end = ended.get(key)
        if end is None:
            assert key[1].startswith(killed), f"a body never ended on a live node: {key}"
            end = killed_at
        bodies.append((start, end, key[3]))
    return bodies


def _peaks(bodies: list[tuple[float, float, str]]) -> tuple[int, int]:
    """The most bodies at once, and the most of one key at once."""
    edges = sorted(
        [(start, 1, key) for start, _, key in bodies] + [(end, -1, key) for _, end, key in bodies],
        key=lambda edge: (edge[0], edge[1]),
    )
    now, by_key = 0, Counter[str]()
    peak = key_peak = 0
    for _, step, key in edges:
        now += step
        by_key[key] += step
        peak, key_peak = max(peak, now), max(key_peak, by_key[key])
    return peak, key_peak


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_a_pool_holds_its_limits_across_a_killed_node_and_loses_no_period(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("postgres_url" if backend == "postgres" else "sqlite_url")
    log = tmp_path / "executions.txt"
    names = ["n1", "n2", "n3"] if backend == "postgres" else ["n1", "n2"]
    nodes = [start_node(tmp_path, name, url, "pooled", EXECUTION_LOG=str(log)) for name in names]
    try:
        _started(nodes)
        began = datetime.now(UTC)
        time.sleep(6)
        (listed,) = json.loads(_command(["pools", "list", "--json"], url, tmp_path))
        assert (listed["pool"], listed["limit"], listed["per_key"]) == ("tenants", LIMIT, PER_KEY)
        assert listed["running"] <= LIMIT
        time.sleep(2)
        victim = next(node for node in nodes if node.name == "n1")
        victim.kill()
        killed_at = time.time()
        nodes.remove(victim)
        nodes.append(start_node(tmp_path, "n4", url, "pooled", EXECUTION_LOG=str(log)))
        _started(nodes[-1:])
        time.sleep(6)
        said = _command(["pools", "set", "tenants", "--limit", "2"], url, tmp_path)
        assert said.startswith("pool tenants: limit 2, 1 per key (set by "), said
        lowered_at = time.time()
        time.sleep(8)
        ended = datetime.now(UTC)
    finally:
        codes = [node.stop() for node in nodes]
    assert codes == [0] * len(nodes)

    bodies = [(start, end, job.split("-")[0]) for start, end, job in _bodies(log, "n1", killed_at)]
    peak, key_peak = _peaks(bodies)
    assert peak <= LIMIT, f"{peak} bodies of the pool ran at once"
    assert key_peak <= PER_KEY, f"{key_peak} bodies of one key ran at once"
    assert peak == LIMIT, "the pool was never full: the test proves nothing"
    # The operator's lower limit holds from every node's next start on: a body that
    # began after the change (its start committed after it) found at most one other.
    after = [body for body in bodies if body[0] > lowered_at + 0.5]
    assert after, "nothing started after the limit was lowered"
    for start, _, _ in after:
        beside = [body for body in bodies if body[0] <= start < body[1]]
        assert len(beside) <= 2, f"a start after the change found {len(beside) - 1} running"

    waited = [
        event
        for node in [*nodes, victim]
        for event in node.events()
        if event.get("event") == "run_waiting"
    ]
    assert {event["pool"] for event in waited} == {"tenants"}
    assert "a" in {event["pool_key"] for event in waited}, "tenant a never waited"

    window = (began + timedelta(seconds=2), ended - timedelta(seconds=4))
    rows: dict[str, list[dict[str, Any]]] = {job: run_rows(url, job) for job in JOBS}
    for job, found in rows.items():
        periods = {row["period"] for row in found}
        first = min(period for period in periods if period >= window[0])
        expected = {
            first + timedelta(seconds=2 * n)
            for n in range(int((window[1] - first).total_seconds() // 2) + 1)
        }
        assert expected <= periods, f"{job}: periods with no row: {sorted(expected - periods)}"
        lost = [
            (row["period"], row["status"], row["reason"])
            for row in found
            if row["status"] in (RunStatus.SKIPPED, RunStatus.MISSED)
        ]
        assert lost == [], f"{job}: periods not run"
    # While the pool had 3 slots, tenants b and c never queued behind tenant a: each ran
    # every period up to the change.
    lowered = datetime.fromtimestamp(lowered_at, UTC) - timedelta(seconds=2)
    for job in ("b-1", "c-1"):
        owed = [row for row in rows[job] if window[0] <= row["period"] <= lowered]
        ran = [row for row in owed if row["status"] == RunStatus.SUCCEEDED]
        assert len(ran) == len(owed), f"{job}: {[(r['period'], r['status']) for r in owed]}"
    # A period's body ends twice only as the killed node's: it returned, SIGKILL came
    # before its outcome committed, and the period ran again as its next attempt elsewhere
    # (bodies are at-least-once across a crash). Never twice on live nodes.
    finished: dict[tuple[str, str], list[list[str]]] = {}
    for words in notes(log):
        if words[3].startswith("done@"):
            finished.setdefault((words[0], words[4]), []).append(words)
    for ends in finished.values():
        *earlier, _ = sorted(ends, key=lambda words: float(words[3].split("@")[1]))
        by_the_killed = all(
            words[1].startswith("n1") and float(words[3].split("@")[1]) <= killed_at
            for words in earlier
        )
        said = f"a period ran twice (n1 killed at {killed_at:.3f}): {ends}"
        assert by_the_killed, said
        assert len({words[2] for words in ends}) == len(ends), said


def test_bad_limits_are_refused_in_one_line_and_change_nothing(
    tmp_path: Path, sqlite_url: str
) -> None:
    def refused(*args: str) -> str:
        done = run_command(["pools", *args, "--database-url", sqlite_url], tmp_path)
        assert done.returncode != 0, done.stdout
        assert "Traceback" not in done.stderr
        (line,) = done.stderr.strip().splitlines()
        return line

    assert "pool 'nightly': name: unknown to this database" in refused(
        "set", "nightly", "--limit", "2"
    )
    database = open_database(sqlite_url)
    try:
        concurrency.declare(database, [Pool("reports", limit=2)])
    finally:
        database.dispose()
    assert "pool 'reports': limit: must be a whole number ≥ 1, got 0" in refused(
        "set", "reports", "--limit", "0"
    )
    assert "pool 'reports': limit: give --limit, --per-key or both" in refused("set", "reports")
    (listed,) = json.loads(_command(["pools", "list", "--json"], sqlite_url, tmp_path))
    assert (listed["limit"], listed["changed_by"]) == (2, None), "a refused change changed it"
    # A good change holds until reset, which gives the pool back the code's limits.
    assert "limit 5" in _command(["pools", "set", "reports", "--limit", "5"], sqlite_url, tmp_path)
    (listed,) = json.loads(_command(["pools", "list", "--json"], sqlite_url, tmp_path))
    assert (listed["limit"], listed["overridden"]) == (5, True), listed
    assert "(the code's)" in _command(["pools", "reset", "reports"], sqlite_url, tmp_path)
    (listed,) = json.loads(_command(["pools", "list", "--json"], sqlite_url, tmp_path))
    assert (listed["limit"], listed["overridden"]) == (2, False), listed
    assert listed["changed_by"] is not None, "the reset records who made it"


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_schedules_created_at_run_time_share_their_templates_pool_by_their_tenant(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """A template in a pool of 2, one run per tenant at once, its key from each schedule's
    arguments: tenant 1's two schedules take turns while tenant 2's runs on time."""
    url = request.getfixturevalue("postgres_url" if backend == "postgres" else "sqlite_url")
    log = tmp_path / "executions.txt"
    node = start_node(tmp_path, "n1", url, "pooled_tenants", EXECUTION_LOG=str(log))
    database = open_database(url)
    try:
        _started([node])
        schedules = Schedules(database)
        with pytest.raises(ScheduleDefinitionError, match="schedule 't9': args: the arguments"):
            schedules.create("t9", tenant_sync, every="2s", args={"other": 9})
        for key, tenant in (("t1:a", 1), ("t1:b", 1), ("t2", 2)):
            schedules.create(key, tenant_sync, every="2s", args={"tenant": tenant})
        time.sleep(14)
    finally:
        database.dispose()
        assert node.stop() == 0
    bodies = [
        (start, end, "1" if key.startswith("@t1") else "2")
        for start, end, key in _bodies(log, "-", 0.0)
    ]
    peak, key_peak = _peaks(bodies)
    assert (peak, key_peak) == (2, 1), "the pool's limits did not hold (or never filled)"
    waited = {e["pool_key"] for e in node.events() if e.get("event") == "run_waiting"}
    assert "tenant-1" in waited
    assert "tenant-2" not in waited, "tenant 2 waited behind tenant 1"
    assert run_rows(url, "@t9") == [], "a refused schedule ran"
