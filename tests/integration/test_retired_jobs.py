"""Jobs taken out of the code are retired: `jobs` shows them so, `check` and the per-job
gauges leave them out, their history stays. One-shot commands stay out of `nodes`."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from click.testing import CliRunner

from scheduler.cli import main
from scheduler.model import ONE_SHOT
from scheduler.store.database import Database
from tests.integration import seed
from tests.sql import update

LONG_AGO = seed.now() - timedelta(days=30)
NINE_MINUTES, FIVE_MINUTES = timedelta(minutes=9), timedelta(minutes=5)


def cli(database_url: str, *args: str) -> tuple[int, Any]:
    result = CliRunner().invoke(main, [*args, "--database-url", database_url, "--json"])
    return result.exit_code, json.loads(result.stdout)


@pytest.fixture
def fleet(database: Database) -> Database:
    """`kept` and `removed` ran on the old daemon (stopped); the new one, started an hour
    ago, registered only `kept`. `cron-only` was last registered by run-once 3 hours ago."""
    now = seed.now()
    old_start, new_start = now - timedelta(days=2), now - timedelta(hours=1)
    seed.add_node(database, "old", heartbeat_at=now, started_at=old_start, stopped_at=now)
    seed.add_node(database, "new", heartbeat_at=now, started_at=new_start)
    for name, last_seen in (("kept", new_start), ("removed", old_start)):
        seed.add_job(database, name, "0 * * * *", first_seen=LONG_AGO, last_seen=last_seen)
    once = now - timedelta(hours=3)
    seed.add_job(database, "cron-only", "*/10 * * * *", first_seen=LONG_AGO, last_seen=once)
    seed.add_node(
        database,
        "run-once-1",
        heartbeat_at=once + timedelta(seconds=3),
        started_at=once + timedelta(seconds=1),
        stopped_at=once + timedelta(seconds=3),
        digest=ONE_SHOT,
    )
    seed.add_run(database, "removed", LONG_AGO, "succeeded", finished_at=LONG_AGO)
    return database


@pytest.mark.usefixtures("fleet")
def test_a_job_no_node_runs_is_retired_and_not_checked(database_url: str) -> None:
    code, listed = cli(database_url, "jobs")
    assert code == 0
    assert {job["name"]: job["retired"] for job in listed} == {
        "cron-only": True,  # many of its periods passed since run-once last registered it
        "kept": False,
        "removed": True,
    }
    code, report = cli(database_url, "check")
    assert code == 1
    assert (report["jobs"], report["retired"]) == (1, 2)
    assert [(f["problem"], f["job"]) for f in report["findings"]] == [("overdue", "kept")]
    code, runs = cli(database_url, "runs", "--job", "removed")
    assert [run["status"] for run in runs] == ["succeeded"], "its history stays"

    table = CliRunner().invoke(main, ["jobs", "--database-url", database_url])
    states = {line.split()[0]: line.split()[-1] for line in table.stdout.splitlines()[1:]}
    assert states == {"cron-only": "retired", "kept": "active", "removed": "retired"}


def test_a_job_a_cronjob_runs_is_watched_through_one_missed_period(
    database_url: str, fleet: Database
) -> None:
    """run-once registered it 9 minutes ago, and the daemon restarted since: one of its
    ten-minute periods may have passed without it, not two."""
    now = seed.now()
    with fleet.transaction() as connection:
        update(connection, "scheduler_nodes", {"id": "run-once-1"}, started_at=now - NINE_MINUTES)
        update(connection, "scheduler_nodes", {"id": "new"}, started_at=now - FIVE_MINUTES)
        last_seen = now - NINE_MINUTES - timedelta(seconds=1)
        update(connection, "scheduler_jobs", {"name": "cron-only"}, last_seen=last_seen)
    code, listed = cli(database_url, "jobs")
    assert code == 0
    assert {job["name"]: job["retired"] for job in listed}["cron-only"] is False


def test_with_every_daemon_down_nothing_is_retired(database_url: str, fleet: Database) -> None:
    with fleet.transaction() as connection:
        update(connection, "scheduler_nodes", {}, stopped_at=seed.now())
    code, report = cli(database_url, "check")
    assert (code, report["retired"], report["nodes_alive"]) == (1, 0, 0)
    assert {f["job"] for f in report["findings"]} == {"kept", "removed", "cron-only"}


@pytest.mark.usefixtures("fleet")
def test_one_shot_commands_are_left_out_of_nodes_unless_all(database_url: str) -> None:
    code, shown = cli(database_url, "nodes")
    assert code == 0
    assert [(node["id"], node["kind"]) for node in shown] == [("new", "daemon"), ("old", "daemon")]
    code, everything = cli(database_url, "nodes", "--all")
    assert code == 0
    assert {node["id"]: node["kind"] for node in everything} == {
        "new": "daemon",
        "old": "daemon",
        "run-once-1": "one-shot",
    }
