"""A node frozen (SIGSTOP, a paused VM) in the middle of its claim transaction, and a
claim made to wait on a lock: the cluster must not stall behind the frozen node, a
lease must never be written already expired, and no period may run twice or be lost."""

from __future__ import annotations

import signal
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from scheduler.model import lock_key as job_lock_key
from scheduler.states import Reason, RunStatus
from tests.acceptance.processes import Node, start_node
from tests.acceptance.records import executions, missing_seconds, run_rows

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def _waiting_backends(admin: psycopg.Connection[tuple[object, ...]], database: str) -> list[str]:
    rows = admin.execute(
        "SELECT wait_event FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'",
        (database,),
    ).fetchall()
    return [str(event) for (event,) in rows]


def _record_leases_as_written(admin: psycopg.Connection[tuple[object, ...]]) -> None:
    """Keep, for every claimed row, its lease next to the clock at the moment it was
    written (not the transaction's start, which is what now() would say)."""
    admin.execute(
        """
        CREATE TABLE leases_written (period timestamptz, lease_expires_at timestamptz,
                                     written_at timestamptz);
        CREATE FUNCTION note_lease() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO leases_written VALUES (NEW.period, NEW.lease_expires_at,
                                               clock_timestamp());
            RETURN NEW;
        END $$;
        CREATE TRIGGER note_lease AFTER INSERT ON scheduler_runs FOR EACH ROW
        WHEN (NEW.status = 'claimed') EXECUTE FUNCTION note_lease();
        """
    )


def test_a_claim_that_waited_on_a_lock_writes_a_live_lease(
    tmp_path: Path, postgres_url: str
) -> None:
    """A session holds the job's claim lock for longer than the lease (a frozen node, a
    stray psql): the node's claim waits, then must not be written with a lease that had
    already run out while it waited, or the period is taken over and run twice."""
    database = postgres_url.rsplit("/", 1)[1]
    log = tmp_path / "executions.txt"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        _record_leases_as_written(admin)
        node = start_node(tmp_path, "node", postgres_url, "long", EXECUTION_LOG=str(log))
        try:
            node.wait_for(lambda event: event.get("event") == "run_started")
            with psycopg.connect(postgres_url) as locker:
                locker.execute("SELECT pg_advisory_xact_lock(%s)", (job_lock_key("long"),))
                deadline = time.monotonic() + 10
                while "advisory" not in _waiting_backends(admin, database):
                    assert time.monotonic() < deadline, "the node's claim never waited"
                    time.sleep(0.05)
                time.sleep(5)  # beyond the 3 s lease
            time.sleep(6)
        finally:
            assert node.stop() == 0
        written = admin.execute(
            "SELECT period FROM leases_written WHERE lease_expires_at <= written_at"
        ).fetchall()
    assert written == [], "a claim was written with its lease already expired"
    starts = Counter(line.split()[0] for line in log.read_text().splitlines() if "start" in line)
    assert [period for period, count in starts.items() if count > 1] == [], "a period ran twice"
    assert not [event for event in node.events() if event.get("event") == "run_retaken"]


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink()
        except OSError:
            continue
        if str(target).startswith("socket:["):
            inodes.add(str(target)[8:-1])
    return inodes


def _owner_of_port(port: int, nodes: list[Node]) -> Node:
    """The node process whose TCP socket has this local port (from /proc/net/tcp)."""
    inode = None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                inode = fields[9]
    assert inode is not None, f"no socket has port {port}"
    (owner,) = [node for node in nodes if inode in _socket_inodes(node.process.pid)]
    return owner


def test_a_node_frozen_inside_its_claim_does_not_stall_the_cluster(
    tmp_path: Path, postgres_url: str
) -> None:
    database = postgres_url.rsplit("/", 1)[1]
    log = tmp_path / "executions.txt"
    nodes = [
        start_node(tmp_path, f"node{n}", postgres_url, "ticker", EXECUTION_LOG=str(log))
        for n in range(2)
    ]
    frozen: Node | None = None
    try:
        for node in nodes:
            node.wait_for(lambda event: event.get("event") == "node_started")
        time.sleep(2)  # both are peers now, and the job runs
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            # A row of a period just ahead, left uncommitted, holds the claim of whichever
            # node claims that period first inside its INSERT, its claim lock taken.
            blocked = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
            with psycopg.connect(postgres_url) as blocker:
                blocker.execute(
                    "INSERT INTO scheduler_runs (job, period, id, status, origin, attempt, "
                    "holder, lease_seconds, claimed_at) VALUES ('tick', %s, 'blocker', "
                    "'claimed', 'schedule', 1, 'test', 30, now())",
                    (blocked,),
                )
                deadline = time.monotonic() + 10
                while True:
                    row = admin.execute(
                        "SELECT client_port FROM pg_stat_activity WHERE datname = %s "
                        "AND wait_event = 'transactionid'",
                        (database,),
                    ).fetchone()
                    if row is not None:
                        break
                    assert time.monotonic() < deadline, "no claim reached the blocked period"
                    time.sleep(0.02)
                frozen = _owner_of_port(int(str(row[0])), nodes)
                frozen.signal(signal.SIGSTOP)
                frozen_at = time.time()
                blocker.rollback()  # the frozen node's INSERT now holds the period itself
            time.sleep(12)
        frozen.signal(signal.SIGCONT)
        time.sleep(3)
    finally:
        if frozen is not None:
            frozen.signal(signal.SIGCONT)
        codes = [node.stop() for node in nodes]
    assert codes == [0, 0]
    rows = run_rows(postgres_url, "tick")
    window = [row for row in rows if frozen_at - 1 <= row["period"].timestamp() <= frozen_at + 12]
    ran = executions(log)
    assert [period for period, times in ran.items() if times > 1] == [], "a period ran twice"
    assert missing_seconds([row["period"] for row in rows]) == []
    skipped = [row["period"] for row in window if row["status"] == RunStatus.SKIPPED]
    overlap = [row for row in window if row["reason"] == Reason.OVERLAP]
    assert len(overlap) <= 2, f"periods behind the frozen node were skipped: {skipped}"
    unrun = [row["period"] for row in window if row["period"].isoformat() not in ran]
    assert len(unrun) <= 2, f"periods of the freeze never ran: {unrun}"


def _database_now(admin: psycopg.Connection[tuple[object, ...]]) -> datetime:
    (now,) = admin.execute("SELECT clock_timestamp()").fetchone() or (None,)
    assert isinstance(now, datetime)
    return now


def test_a_leftover_claimed_after_the_next_period_is_not_skipped(
    tmp_path: Path, postgres_url: str
) -> None:
    """The node that owns a job's share hangs (SIGSTOP) while its peer still counts it
    alive, so period P is claimed by the peer as a leftover, a second late. Meanwhile a
    node whose view differs (here: a session standing in for it, holding the job's lock
    so that the order is certain) claims P+1 on time. P fell due before P+1 existed: it
    must run, not be recorded as skipped for overlap behind P+1."""
    database = postgres_url.rsplit("/", 1)[1]
    log = tmp_path / "executions.txt"
    first = start_node(tmp_path, "first", postgres_url, "ticker", EXECUTION_LOG=str(log))
    first.wait_for(lambda event: event.get("event") == "node_started")
    second = start_node(tmp_path, "second", postgres_url, "ticker", EXECUTION_LOG=str(log))
    nodes = {"first": first, "second": second}
    try:
        second.wait_for(lambda event: event.get("event") == "node_started")
        time.sleep(3)  # both have had a heartbeat: each counts the other in
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            rows = admin.execute(
                "SELECT name, id FROM scheduler_nodes WHERE stopped_at IS NULL"
            ).fetchall()
            ids: dict[str, str] = {str(name): str(node_id) for name, node_id in rows}
            ring = sorted(ids.values())
            owner_id = ring[job_lock_key("tick") % len(ring)]
            owner = nodes[next(name for name, node_id in ids.items() if node_id == owner_id)]
            # Freeze the owner between two runs, so that no run of its own is left open.
            done = len([e for e in owner.events() if e.get("event") == "run_succeeded"])
            owner.wait_for(
                lambda _: (
                    len([e for e in owner.events() if e.get("event") == "run_succeeded"]) > done
                )
            )
            owner.signal(signal.SIGSTOP)
            now = _database_now(admin)
            period = now.astimezone(UTC).replace(microsecond=0) + timedelta(seconds=3)
            with psycopg.connect(postgres_url) as locker:
                while _database_now(admin) < period + timedelta(seconds=0.4):
                    time.sleep(0.02)
                locker.execute("SELECT pg_advisory_xact_lock(%s)", (job_lock_key("tick"),))
                deadline = time.monotonic() + 5
                while "advisory" not in _waiting_backends(admin, database):
                    assert time.monotonic() < deadline, "the peer never claimed the leftover"
                    time.sleep(0.02)
                # P+1, claimed on time by a node that did not know P was left over.
                locker.execute(
                    """
                    INSERT INTO scheduler_runs (id, job, period, status, origin, attempt,
                        started_attempts, holder, lease_seconds, lease_expires_at, claimed_at)
                    VALUES (md5(random()::text), 'tick', %s, 'claimed', 'schedule', 1, 0, %s,
                            3, clock_timestamp() + interval '3 seconds', %s)
                    """,
                    (period + timedelta(seconds=1), owner_id, period + timedelta(seconds=1)),
                )
            deadline = time.monotonic() + 15
            while True:
                (status,) = admin.execute(
                    "SELECT status FROM scheduler_runs WHERE job = 'tick' AND period = %s",
                    (period,),
                ).fetchone() or (None,)
                if status not in (None, "claimed", "running") or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        owner.signal(signal.SIGCONT)
    finally:
        for node in nodes.values():
            node.process.send_signal(signal.SIGCONT)
            assert node.stop() == 0
    assert status == RunStatus.SUCCEEDED, f"period {period} ended {status}, not succeeded"
    assert executions(log)[period.isoformat()] == 1
    assert [period for period, count in executions(log).items() if count > 1] == []
    skipped = [row for row in run_rows(postgres_url, "tick") if row["status"] == "skipped"]
    assert [(row["period"], row["reason"]) for row in skipped] == []
