"""The fault plan: a seeded `random.Random` decides which fault, on which node, when and
for how long, before anything runs, so that a seed names one plan and can be replayed
(the processes' own timing still varies from run to run).

At most one fault is active at a time: each waits a quiet gap after the previous one
has ended. The plan leaves the last `SETTLE_S` seconds of the soak quiet, so that every
due period gets its row and every started run ends before the checker judges the
history.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# Process faults (one node).
KILL = "sigkill"  # SIGKILL, a pause, a restart
TERM = "sigterm"  # SIGTERM (the node drains within its grace), a pause, a restart
STOP = "sigstop"  # SIGSTOP of the node and its job children past a 6 s lease, SIGCONT
# Network faults (one node's proxy).
CUT = "cut"  # its connections closed and new ones refused, then accepted again
BLACKHOLE = "blackhole"  # its bytes held both ways past a 6 s lease, then passed
# Server faults (everyone).
TERMINATE = "terminate_all"  # pg_terminate_backend of every session of the database
RESTART = "server_restart"  # a fast shutdown, down for a few seconds, started again

KINDS = (KILL, TERM, STOP, CUT, BLACKHOLE, TERMINATE, RESTART)
NODE_FAULTS = (KILL, TERM, STOP, CUT, BLACKHOLE)
# How often each kind is drawn (the server faults are rarer: they hit every node).
WEIGHTS = {KILL: 3, TERM: 3, STOP: 2, CUT: 3, BLACKHOLE: 2, TERMINATE: 2, RESTART: 2}

SETTLE_S = 40.0  # more than the longest lease (30 s) plus backoffs
WARMUP_S = 5.0  # quiet after every node is up, before the first fault
GAPS_S = (3.0, 8.0)  # a quiet gap before each fault
# The grace a node incarnation gets (SIGTERM): shorter than soak-slow's 7 s body and
# soak-coop's 8 s sometimes, longer other times.
GRACES_S = (3, 12)


@dataclass(frozen=True)
class Fault:
    index: int
    gap_s: float  # quiet before it starts (after the previous fault ended)
    kind: str
    node: str | None  # None: the server (every node)
    hold_s: float  # how long it lasts: stopped, cut, black-holed, down, or dead before restart
    grace_s: int  # the grace of the incarnation a restart starts (kill, term)

    def describe(self) -> str:
        where = self.node or "server"
        extra = f" restart with --grace {self.grace_s}s" if self.kind in (KILL, TERM) else ""
        return (
            f"#{self.index:02d} after {self.gap_s:4.1f}s quiet: {self.kind:<14} {where:<7}"
            f" for {self.hold_s:4.1f}s{extra}"
        )


@dataclass(frozen=True)
class Plan:
    seed: int
    minutes: float
    nodes: tuple[str, ...]
    first_graces: tuple[int, ...]  # each node's first incarnation
    faults: tuple[Fault, ...]

    @property
    def total_s(self) -> float:
        return self.minutes * 60

    @property
    def faults_until_s(self) -> float:
        """No fault starts after this many seconds of the soak (then the settle)."""
        return self.total_s - SETTLE_S

    def describe(self) -> str:
        head = (
            f"fault plan (seed {self.seed}, {self.minutes:g} min, {len(self.faults)} faults"
            f" planned; graces {dict(zip(self.nodes, self.first_graces, strict=True))}):"
        )
        return "\n".join([head, *(f"  {fault.describe()}" for fault in self.faults)])


def _hold(rng: random.Random, kind: str) -> float:
    if kind == KILL:
        return rng.uniform(1.0, 4.0)  # dead before the restart
    if kind == TERM:
        return rng.uniform(0.5, 2.0)  # gone (after its drain) before the restart
    if kind in (STOP, BLACKHOLE):
        return rng.uniform(8.0, 12.0)  # past soak-slow's and soak-coop's 6 s lease
    if kind == CUT:
        return rng.uniform(2.0, 6.0)
    if kind == RESTART:
        return rng.uniform(2.0, 6.0)  # the server down
    return 0.0  # terminate_all: one moment


def make_plan(seed: int, minutes: float, nodes: tuple[str, ...]) -> Plan:
    """The faults of a soak of `minutes`: more than the soak can hold, since the injector
    stops starting them once `faults_until_s` has passed (a fault's real length varies)."""
    rng = random.Random(seed)
    first_graces = tuple(rng.choice(GRACES_S) for _ in nodes)
    kinds = list(WEIGHTS)
    weights = [WEIGHTS[kind] for kind in kinds]
    faults: list[Fault] = []
    budget = max(0.0, minutes * 60 - SETTLE_S - WARMUP_S)
    spent = 0.0
    while spent < budget:
        kind = rng.choices(kinds, weights)[0]
        node = rng.choice(nodes) if kind in NODE_FAULTS else None
        fault = Fault(
            index=len(faults),
            gap_s=round(rng.uniform(*GAPS_S), 1),
            kind=kind,
            node=node,
            hold_s=round(_hold(rng, kind), 1),
            grace_s=rng.choice(GRACES_S),
        )
        faults.append(fault)
        # What a fault costs in time beyond its hold: a restart, a drain, a server's start.
        spent += fault.gap_s + fault.hold_s + 3.0
    return Plan(seed, minutes, nodes, first_graces, tuple(faults))
