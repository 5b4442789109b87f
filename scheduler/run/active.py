"""A run this node holds, and the phase it is in.

WAITING: claimed, not started (queued behind an earlier period, or for a worker).
SENDING: queued for a task queue, its message being sent; the run then ends here.
RUNNING: its function is being called. RECORDING: the function returned; its outcome is
with the outcome writer. LINGERING: it timed out in its thread and still runs there.
ABANDONED: given back (the node drains, or it never started).
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from multiprocessing.process import BaseProcess

from scheduler.model import Claim
from scheduler.registry import Job
from scheduler.run.context import RunContext
from scheduler.run.orphans import Orphan


class Phase(Enum):
    WAITING = "waiting"
    SENDING = "sending"
    RUNNING = "running"
    RECORDING = "recording"
    LINGERING = "lingering"
    ABANDONED = "abandoned"


@dataclass
class ActiveRun:
    claim: Claim
    context: RunContext
    # Its job's overlap is not `allow`: it starts only once no earlier period is active.
    in_turn: bool
    # The job that runs it, found once when it was taken in (a schedule's from its row:
    # never looked up again while the run is in hand).
    job: Job
    # Resolves when the run is over, whether it ran here or was abandoned.
    future: Future[None] = field(default_factory=Future)
    # Handed to the starter (False while it waits behind an earlier period).
    launched: bool = False
    phase: Phase = Phase.WAITING
    lost: bool = False
    # Its run_started line is out already (the starter says it for a batch it started).
    said_started: bool = False
    child: BaseProcess | None = None
    # Given up while its function ran in a thread: watched as a possible orphan.
    orphan: Orphan | None = None
    # Its pool and concurrency key (a pooled job's): its start is gated by the pool.
    pool: str | None = None
    pool_key: str | None = None
    # Held back by its pool's limits: waits on no thread (`run.pooled`). `held_back`: the
    # starter's batch found it so, and `_hand` parks it.
    parked: bool = False
    held_back: bool = False
    # Its `run_waiting` line is out (said once, however often it parks again).
    said_waiting: bool = False
    # This process's monotonic clock when the run was taken in here, after the write
    # that gave the lease had committed: a renewal sent since must find its row.
    known_from: float = field(default_factory=time.monotonic)

    @property
    def period(self) -> datetime:
        return self.claim.period
