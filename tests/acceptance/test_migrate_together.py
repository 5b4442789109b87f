"""Replicas started together on an empty PostgreSQL database, each with `--migrate`, beside
a `scheduler migrate` (a deployment's first rollout): one of them creates the schema, the
others wait for it and find it current, and every process comes up.

"Together" is made certain rather than left to the processes' start-up times: the test
holds the migration lock (the advisory lock every migrating process takes first) until
all three wait on it, then lets them go at once."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import psycopg
import pytest

from scheduler.store import migrate
from scheduler.store.database import open_database
from tests.acceptance.processes import SCHEDULER, Node, environment, start_node

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
PROCESSES = 3


def _waiting_on_the_lock(admin: psycopg.Connection[tuple[object, ...]]) -> int:
    row = admin.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    ).fetchone()
    assert row is not None
    return int(str(row[0]))


def test_replicas_with_migrate_and_a_migrate_command_start_together_on_an_empty_database(
    tmp_path: Path, empty_postgres_url: str
) -> None:
    url = empty_postgres_url
    evidence = tmp_path / "executions.txt"
    migrate_log = tmp_path / "migrate.log"
    nodes: list[Node] = []
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("SELECT pg_advisory_lock(%s)", (migrate.MIGRATE_LOCK_KEY,))
        with migrate_log.open("wb") as out:
            migrator = subprocess.Popen(
                [SCHEDULER, "migrate", "--database-url", url, "--log-format", "json"],
                cwd=tmp_path,
                env=environment(),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            nodes += [
                start_node(
                    tmp_path, f"node{n}", url, "ticker", ["--migrate"], EXECUTION_LOG=str(evidence)
                )
                for n in range(1, PROCESSES)
            ]
            deadline = time.monotonic() + 60
            while _waiting_on_the_lock(admin) < PROCESSES:
                assert time.monotonic() < deadline, "the processes never reached the lock"
                assert migrator.poll() is None, migrate_log.read_text()
                assert all(node.process.poll() is None for node in nodes)
                time.sleep(0.05)
            admin.execute("SELECT pg_advisory_unlock(%s)", (migrate.MIGRATE_LOCK_KEY,))
            assert migrator.wait(timeout=120) == 0, migrate_log.read_text()[-4000:]
            for node in nodes:
                node.wait_for(lambda event: event.get("event") == "node_started", timeout=60)
            while not (evidence.exists() and evidence.read_text()):
                assert time.monotonic() < deadline + 60, "no node ran the job"
                time.sleep(0.1)
        finally:
            migrator.kill()
            codes = [node.stop() for node in nodes]
    assert codes == [0] * len(nodes), [node.log_path.read_text()[-4000:] for node in nodes]
    assert migrate_log.read_text().count('"schema_migrated"') == 1
    database = open_database(url, connections=1)
    try:
        migrate.require_current_schema(database)
        with database.autocommit() as connection:
            versions = connection.execute(f"SELECT version_num FROM {migrate.VERSION_TABLE}")
            assert list(versions.scalars()) == [migrate.head_revision()]
    finally:
        database.dispose()
