"""The fleet under test and the hand that breaks it: a throwaway PostgreSQL server,
three nodes each reaching it through a loopback proxy of its own, and the faults of a
plan carried out one at a time, each written to the fault log with its real start and
end (wall clock, the server's clock too: same host).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from tests.acceptance.processes import SCHEDULER, Node, environment
from tests.acceptance.tcp_proxy import Proxy
from tests.postgres_cluster import Cluster
from tests.soak import plan as kinds
from tests.soak.jobs import DATABASE_ENV
from tests.soak.ledger import LEDGER_ENV
from tests.soak.plan import Fault, Plan

JOBS_MODULE = "tests.soak.jobs"
STARTED_WITHIN_S = 60.0


@dataclass(frozen=True)
class FaultRecord:
    """A fault as it happened: `start` and `end` are wall-clock seconds; `end` is when the
    node or server was back (restarted and serving, continued, reachable, started)."""

    kind: str
    node: str | None
    start: float
    end: float
    detail: str = ""


@dataclass(frozen=True)
class Exit:
    """A node process that ended: when we saw it gone, and whether we meant it."""

    node: str
    pid: int
    wall: float
    code: int | None
    expected: bool


@dataclass
class Member:
    """One node name: its proxy and its incarnations, newest last."""

    name: str
    proxy: Proxy
    incarnations: list[Node] = field(default_factory=list)
    grace_s: int = 0  # its current incarnation's

    @property
    def current(self) -> Node:
        return self.incarnations[-1]


class Fleet:
    def __init__(self, cluster: Cluster, folder: Path, ledger_path: Path, plan: Plan) -> None:
        self.cluster = cluster
        self.folder = folder
        self.ledger_path = ledger_path
        self.plan = plan
        self.members = {name: Member(name, Proxy(cluster.port)) for name in plan.nodes}
        self.faults: list[FaultRecord] = []
        self.exits: list[Exit] = []
        self.skipped_faults = 0
        self._reaped: set[int] = set()
        for member in self.members.values():
            member.proxy.start()

    # Nodes ---------------------------------------------------------------------------

    def start_node(self, name: str, grace_s: int) -> Node:
        member = self.members[name]
        log_path = self.folder / f"{name}.{len(member.incarnations)}.log"
        url = member.proxy.url(self.cluster.url)
        with log_path.open("wb") as out:
            process = subprocess.Popen(
                [
                    SCHEDULER,
                    "run",
                    "--database-url",
                    url,
                    "--jobs",
                    JOBS_MODULE,
                    "--log-format",
                    "json",
                    "--node-name",
                    name,
                    "--liveness",
                    "session",
                    "--grace",
                    f"{grace_s}s",
                    "--workers",
                    "16",
                ],
                cwd=self.folder,
                env=environment(**{LEDGER_ENV: str(self.ledger_path), DATABASE_ENV: url}),
                stdout=out,
                stderr=subprocess.STDOUT,
                # Its own process group: SIGSTOP reaches the node and its job children.
                start_new_session=True,
            )
        node = Node(name, process, log_path)
        member.incarnations.append(node)
        member.grace_s = grace_s
        return node

    def wait_started(self, node: Node, timeout: float = STARTED_WITHIN_S) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(event.get("event") == "node_started" for event in node.events()):
                return True
            if node.process.poll() is not None:
                return False
            time.sleep(0.1)
        return False

    def start_all(self) -> None:
        for name, grace in zip(self.plan.nodes, self.plan.first_graces, strict=True):
            self.start_node(name, grace)
        for member in self.members.values():
            if not self.wait_started(member.current):
                raise AssertionError(
                    f"{member.name} did not start; log:\n{member.current.log_path.read_text()}"
                )

    def _reap(self, member: Member, *, expected: bool, timeout: float) -> None:
        node = member.current
        if node.process.pid in self._reaped:
            return
        self._reaped.add(node.process.pid)
        try:
            code = node.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._signal_group(node, signal.SIGKILL)
            code = node.process.wait(timeout=30)
            expected = False
        self.exits.append(Exit(member.name, node.process.pid, time.time(), code, expected))

    def look_for_unexpected_exits(self) -> None:
        """A node that left on its own (a crash): noted, and started again."""
        for member in self.members.values():
            node = member.current
            if node.process.poll() is not None:
                self._reap(member, expected=False, timeout=1)
                self.start_node(member.name, member.grace_s)
                self.wait_started(member.current)

    @staticmethod
    def _signal_group(node: Node, signum: signal.Signals) -> None:
        with suppress(ProcessLookupError):
            os.killpg(node.process.pid, signum)

    # Faults --------------------------------------------------------------------------

    def run_plan(self, started_at: float, log: list[str]) -> None:
        """Carry out the plan's faults until `faults_until_s` after `started_at`
        (monotonic); each after its quiet gap, one at a time."""
        time.sleep(kinds.WARMUP_S)
        for fault in self.plan.faults:
            time.sleep(fault.gap_s)
            self.look_for_unexpected_exits()
            if time.monotonic() - started_at + fault.hold_s > self.plan.faults_until_s:
                self.skipped_faults = len(self.plan.faults) - fault.index
                break
            record = self.inject(fault)
            self.faults.append(record)
            log.append(
                f"  {fault.describe()}: {record.end - record.start:.1f}s"
                f"{' ' + record.detail if record.detail else ''}"
            )
        self.look_for_unexpected_exits()

    def inject(self, fault: Fault) -> FaultRecord:
        handler = {
            kinds.KILL: self._kill,
            kinds.TERM: self._term,
            kinds.STOP: self._stop,
            kinds.CUT: self._cut,
            kinds.BLACKHOLE: self._blackhole,
            kinds.TERMINATE: self._terminate,
            kinds.RESTART: self._restart,
        }[fault.kind]
        return handler(fault)

    def _kill(self, fault: Fault) -> FaultRecord:
        assert fault.node is not None
        member = self.members[fault.node]
        start = time.time()
        # The node alone: its job children must leave by themselves (they watch a pipe).
        member.current.process.kill()
        self._reap(member, expected=True, timeout=30)
        time.sleep(fault.hold_s)
        self.start_node(fault.node, fault.grace_s)
        up = self.wait_started(member.current)
        return FaultRecord(fault.kind, fault.node, start, time.time(), "" if up else "not back")

    def _term(self, fault: Fault) -> FaultRecord:
        assert fault.node is not None
        member = self.members[fault.node]
        start = time.time()
        member.current.process.send_signal(signal.SIGTERM)
        self._reap(member, expected=True, timeout=60)
        drained = time.time() - start
        time.sleep(fault.hold_s)
        self.start_node(fault.node, fault.grace_s)
        up = self.wait_started(member.current)
        detail = f"drained in {drained:.1f}s" + ("" if up else ", not back")
        return FaultRecord(fault.kind, fault.node, start, time.time(), detail)

    def _stop(self, fault: Fault) -> FaultRecord:
        assert fault.node is not None
        node = self.members[fault.node].current
        start = time.time()
        self._signal_group(node, signal.SIGSTOP)
        time.sleep(fault.hold_s)
        self._signal_group(node, signal.SIGCONT)
        return FaultRecord(fault.kind, fault.node, start, time.time())

    def _cut(self, fault: Fault) -> FaultRecord:
        assert fault.node is not None
        proxy = self.members[fault.node].proxy
        start = time.time()
        proxy.cut()
        time.sleep(fault.hold_s)
        proxy.start()
        return FaultRecord(fault.kind, fault.node, start, time.time())

    def _blackhole(self, fault: Fault) -> FaultRecord:
        assert fault.node is not None
        proxy = self.members[fault.node].proxy
        start = time.time()
        proxy.freeze()
        time.sleep(fault.hold_s)
        proxy.thaw()
        return FaultRecord(fault.kind, fault.node, start, time.time())

    def _terminate(self, fault: Fault) -> FaultRecord:
        start = time.time()
        ended = self.cluster.terminate_all()
        return FaultRecord(fault.kind, None, start, time.time(), f"{ended} sessions ended")

    def _restart(self, fault: Fault) -> FaultRecord:
        start = time.time()
        self.cluster.restart(down_for=fault.hold_s, mode="fast")
        return FaultRecord(fault.kind, None, start, time.time())

    # The end ---------------------------------------------------------------------------

    def stop_all(self) -> None:
        """SIGTERM every node and wait for each; what will not leave is killed."""
        for member in self.members.values():
            if member.current.process.poll() is None:
                member.current.process.send_signal(signal.SIGTERM)
        for member in self.members.values():
            self._reap(member, expected=True, timeout=60)

    def destroy(self) -> None:
        """Whatever happened: no node, no job child, no proxy left behind."""
        for member in self.members.values():
            member.proxy.thaw()
            for node in member.incarnations:
                if node.process.poll() is None:
                    self._signal_group(node, signal.SIGCONT)
                    self._signal_group(node, signal.SIGKILL)
                    with suppress(subprocess.TimeoutExpired):
                        node.process.wait(timeout=10)
            member.proxy.cut()

    def node_logs(self) -> list[Path]:
        return [node.log_path for member in self.members.values() for node in member.incarnations]
