"""A stall's backlog is not skipped behind itself (issue 41, item 3): one of two nodes
freezes inside its claim transaction (the server holds its job locks until it ends the
session), the other's claims wait; what it claimed meanwhile and did not start yet must
not make the next periods `skipped (overlap)`: only a body running when a period fell
due may. Running is what the database can know: from the holder's word that the body
began (`began_at`, written after the function was called) to the outcome's write (a few
ms after it returns); a skip is justified by an earlier period's run said to have begun
by the period's instant whose outcome committed after the skip was judged, and whose
body really began before that word. Measured on the old code: 502 periods skipped
behind nothing running (267 by this reckoning); then 26 in one CI run, behind starts
whose bodies began seconds after their start's write (the start alone was taken for a
body running)."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from scheduler.store.database import open_database
from tests.acceptance.processes import start_node
from tests.acceptance.tcp_proxy import Proxy
from tests.postgres_cluster import Cluster
from tests.sql import rows

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

CLAIM_STATEMENT = b"INSERT INTO scheduler_runs"

Key = tuple[str, datetime]


class Body(NamedTuple):
    """One run of a body, as its own note says (`period` names its run)."""

    period: datetime
    began: float
    ended: float


def _bodies(log: Path) -> dict[str, list[Body]]:
    """Each job's bodies."""
    found: dict[str, list[Body]] = defaultdict(list)
    for line in log.read_text().splitlines():
        words = line.split()
        if len(words) == 5 and words[3].startswith("ran="):
            began, ended = words[3].removeprefix("ran=").split(",")
            period = datetime.fromisoformat(words[0])
            found[words[4]].append(Body(period, float(began), float(ended)))
    return found


def _justified(skip: dict[str, Any], bodies: list[Body], runs: dict[Key, dict[str, Any]]) -> bool:
    """An earlier period's body ran at the skipped period's instant, by its own note or
    by the database when the skip was judged (see the module's docstring)."""
    instant = _instant(skip["period"])
    for body in bodies:
        if body.period >= skip["period"]:
            continue
        if body.began <= instant <= body.ended:
            return True
        run = runs.get((skip["job"], body.period))
        if (
            run is not None
            and run["began_at"] is not None
            and run["began_at"] <= skip["period"]
            and run["committed_at"] >= skip["claimed_at"]
            and body.began <= run["began_at"].timestamp()
        ):
            return True
    return False


def _nearest(skip: dict[str, Any], runs: dict[Key, dict[str, Any]], bodies: list[Body]) -> str:
    """The run of the period before a skipped one, as the database and its body saw it."""
    earlier = [body for body in bodies if body.period < skip["period"]]
    if not earlier:
        return f"{skip['job']} {skip['period']:%H:%M:%S}: no earlier body"
    body = max(earlier, key=lambda body: body.began)
    run = runs.get((skip["job"], body.period), {})
    started, began = run.get("started_at"), run.get("began_at")
    finished = run.get("finished_at")
    return (
        f"{skip['job']} {skip['period']:%H:%M:%S} judged {skip['claimed_at']:%S.%f}:"
        f" run {body.period:%H:%M:%S} started {started and f'{started:%S.%f}'}"
        f" began {began and f'{began:%S.%f}'} finished {finished and f'{finished:%S.%f}'},"
        f" body {body.began % 60:.6f}-{body.ended % 60:.6f}"
    )


def test_a_node_frozen_in_its_claim_leaves_no_skip_behind_nothing(
    tmp_path: Path, cluster: Cluster
) -> None:
    log = tmp_path / "executions.txt"
    proxy = Proxy(target_port=cluster.port, framed=True)
    proxy.start()
    frozen = start_node(
        tmp_path,
        "frozen",
        proxy.url(cluster.url),
        "stampede",
        ["--liveness", "session"],
        EXECUTION_LOG=str(log),
    )
    other = start_node(tmp_path, "other", cluster.url, "stampede", EXECUTION_LOG=str(log))
    try:
        for node in (frozen, other):
            node.wait_for(lambda e: e.get("event") == "node_started", timeout=60)
        # Not shorter: the warm-up decides where the trap falls (with session liveness a
        # statement is prepared on the server from its fifth use). Three periods in, the
        # other's claims waited the whole freeze, not the 5 s of idle-in-transaction
        # they wait after this warm-up: a backlog of another shape than the one measured.
        time.sleep(5)
        tails = [_Succeeded(node.log_path) for node in (frozen, other)]
        fell = proxy.freeze_after(CLAIM_STATEMENT)
        assert fell.wait(10), "no claim went through the proxy"
        time.sleep(15)
        proxy.thaw()
        # Both nodes past the thaw's backlog: each ran a period due 5 s after the thaw
        # or later (the frozen one rejoined, its stalled claim failed and the backlog
        # drained a few seconds before), or 10 s as before.
        thawed = datetime.now(UTC) + timedelta(seconds=5)
        _until(lambda: all(max(tail.periods(), default=thawed) > thawed for tail in tails), 10)
    finally:
        proxy.thaw()
        for node in (frozen, other):
            node.stop()
        proxy.cut()
    database = open_database(cluster.url)
    try:
        skipped = rows(database, "scheduler_runs", status="skipped", reason="overlap")
        # The outcome's commit, not `finished_at` (its statement's start): a claim's
        # snapshot taken between the two still saw the body running.
        with database.transaction() as connection:
            succeeded = connection.execute(
                "SELECT *, pg_xact_commit_timestamp(xmin) AS committed_at"
                " FROM scheduler_runs WHERE status = 'succeeded'"
            ).mappings()
        runs = {(row["job"], row["period"]): row for row in succeeded}
    finally:
        database.dispose()
    bodies = _bodies(log)
    assert bodies, "no body ran"
    unjustified = [row for row in skipped if not _justified(row, bodies[row["job"]], runs)]
    assert unjustified == [], (
        f"{len(unjustified)} periods skipped behind nothing running, such as\n"
        + "\n".join(_nearest(row, runs, bodies[row["job"]]) for row in unjustified[:5])
    )


class _Succeeded:
    """The periods a node's log says it ran, read from where the last look stopped (the
    log grows by hundreds of lines a second: parsing all of it each time would load the
    machine the test times)."""

    def __init__(self, log: Path) -> None:
        self._log = log
        self._offset = 0
        self._periods: set[datetime] = set()

    def periods(self) -> set[datetime]:
        with self._log.open("rb") as source:
            source.seek(self._offset)
            data = source.read()
        complete = data.rfind(b"\n") + 1
        self._offset += complete
        for line in data[:complete].splitlines():
            if b'"run_succeeded"' in line:
                with suppress(ValueError, KeyError):
                    self._periods.add(datetime.fromisoformat(json.loads(line)["period"]))
        return self._periods


def _until(condition: Callable[[], bool], longest: float) -> None:
    """Until the condition holds, or `longest` seconds passed (not a failure: the test
    then goes on as it did with a fixed wait that long)."""
    deadline = time.monotonic() + longest
    while time.monotonic() < deadline and not condition():
        time.sleep(0.25)


def _instant(period: datetime) -> float:
    return period.timestamp()
