"""The fault soak: three nodes on PostgreSQL, the job mix of `tests.soak.jobs`, a seeded
plan of faults (SIGKILL, SIGTERM, SIGSTOP, a node's proxy cut or black-holed,
pg_terminate_backend of everything, a server restart), a quiet settle, then the checker
(`tests.soak.checker`) over the ledger, the tables, the logs and the fault log.

`--soak-minutes N` (default 3), `--soak-seed S` (default random) and `--soak-burners K`
(default 0: K processes spin on the CPU throughout, a machine short of CPU); the seed
and the command that replays its plan are printed first, pass or fail. Deselect with
`-m "not soak"`.
"""

from __future__ import annotations

import math
import pickle
import random
import shlex
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.postgres_cluster import throwaway_cluster
from tests.soak.checker import History, check, summary, timeline
from tests.soak.history import (
    create_items_table,
    create_schedules,
    job_specs,
    read_events,
    read_items,
    read_tables,
)
from tests.soak.injector import Fleet
from tests.soak.ledger import read
from tests.soak.plan import SETTLE_S, make_plan

pytestmark = [pytest.mark.soak, pytest.mark.slow]

NODES = ("soak-1", "soak-2", "soak-3")
SHOWN_FINDINGS = 40


@contextmanager
def cpu_burners(count: int) -> Iterator[None]:
    """`count` processes that spin on the CPU until the block ends."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


def _deadlocks(folder: Path) -> int | str:
    """How many deadlocks the server's log says it broke (each a second's stall of the
    statements in it)."""
    log = folder / "postgresql.log"
    if not log.exists():
        return "no server log"
    return log.read_text(errors="replace").count("ERROR:  deadlock detected")


def test_fault_soak(request: pytest.FixtureRequest, tmp_path: Path, capsys) -> None:
    minutes = float(request.config.getoption("--soak-minutes"))
    burners = int(request.config.getoption("--soak-burners"))
    seed = request.config.getoption("--soak-seed")
    if seed is None:
        seed = random.SystemRandom().randrange(1, 2**31)
    replay = shlex.join(
        [
            ".venv/bin/python",
            "-m",
            "pytest",
            "tests/soak/test_soak.py",
            "--soak-seed",
            str(seed),
            "--soak-minutes",
            f"{minutes:g}",
            *(["--soak-burners", str(burners)] if burners else []),
        ]
    )
    burning = f", {burners} CPU burner(s)" if burners else ""
    head = f"soak seed {seed} ({minutes:g} min{burning}); replay: {replay}"
    plan = make_plan(seed, minutes, NODES)
    with capsys.disabled():
        print(f"\n{head}\n{plan.describe()}", flush=True)

    ledger_path = tmp_path / "ledger.jsonl"
    done: list[str] = []
    with cpu_burners(burners), throwaway_cluster() as cluster:
        create_items_table(cluster.url)
        fleet = Fleet(cluster, tmp_path, ledger_path, plan)
        try:
            fleet.start_all()
            schedules = create_schedules(cluster.url)
            began = time.monotonic()
            # Judged: the periods due from the first whole second after every node is up...
            window_start = math.ceil(time.time()) + 1.0
            fleet.run_plan(began, done)
            # ...until the last fault is over and the quiet settle begins.
            settle_start = time.time()
            time.sleep(max(SETTLE_S, plan.total_s - (time.monotonic() - began)))
            fleet.look_for_unexpected_exits()
            observed_until = time.time()
            runs, attempts = read_tables(cluster.url)
            fleet.stop_all()
            items = read_items(cluster.url)
            # The server's log, beside the nodes': the statements of any deadlock it broke.
            shutil.copy(cluster.log, tmp_path / "postgresql.log")
        finally:
            fleet.destroy()

    history = History(
        jobs=job_specs(window_start, settle_start, schedules),
        ledger=read(ledger_path),
        runs=runs,
        attempts=attempts,
        items=items,
        events=read_events(fleet.node_logs()),
        faults=fleet.faults,
        exits=fleet.exits,
        window=(window_start, settle_start),
        observed_until=observed_until,
    )
    # Kept beside the logs, so that the checker can be run again on this very history.
    (tmp_path / "history.pickle").write_bytes(pickle.dumps(history))
    verdict = check(history)
    report = "\n".join(
        [
            head,
            "faults as injected:",
            *done,
            f"judged window: {settle_start - window_start:.0f}s, then"
            f" {observed_until - settle_start:.0f}s of settle; logs and ledger in {tmp_path}",
            summary(history, verdict),
            f"deadlocks the server broke (reported, not judged): {_deadlocks(tmp_path)}",
        ]
    )
    with capsys.disabled():
        print(report, flush=True)
    if verdict.ok:
        return
    rules = Counter(finding.rule for finding in verdict.findings)
    first = verdict.findings[0]
    example = (
        f"example, {first}:\n{timeline(history, first.job, first.period)}"
        if first.period is not None
        else ""
    )
    pytest.fail(
        "\n".join(
            [
                head,
                "failed rules: " + ", ".join(f"{rule} x{n}" for rule, n in sorted(rules.items())),
                *(str(finding) for finding in verdict.findings[:SHOWN_FINDINGS]),
                example,
                report,
            ]
        ),
        pytrace=False,
    )
