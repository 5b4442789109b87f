"""Sharing out the periods due at one instant among the nodes that run the same jobs.

Every node may claim every period; the claim's primary key alone decides who runs it.
But when all nodes try all periods at once, one node tends to win whole batches while
the others queue behind its locks, and each period costs every node a claim. So each
node claims its own share at once (a job belongs to one of the live peers, by a hash of
its name) and looks at the others' shares only after HANDOFF_S: by then their owners
have claimed them, and a cheap read finds nothing left. A share whose owner died, hangs
or does not know the job yet is claimed by the others then: late, never lost.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Sequence

from scheduler.model import lock_key as job_lock_key
from scheduler.registry import Job

# How long a node leaves another node's share to it before claiming what is left.
HANDOFF_S = 1.0


def jobs_digest(jobs: Iterable[Job]) -> str:
    """The same for nodes that run the same jobs on the same schedules."""
    lines = sorted(
        f"{job.name}\t{job.schedule.expression}\t{job.schedule.timezone}"
        if job.schedule is not None
        else f"{job.name}\ttemplate"
        for job in jobs
    )
    return hashlib.blake2b("\n".join(lines).encode(), digest_size=16).hexdigest()


class Peers:
    """Which of the due jobs are this node's to claim first; peers change at heartbeats."""

    def __init__(self, node_id: str) -> None:
        self._node_id = node_id
        self._peers: tuple[str, ...] = (node_id,)
        self._owned: dict[str, bool] = {}
        self._lock = threading.Lock()

    @property
    def peers(self) -> tuple[str, ...]:
        return self._peers

    def update(self, peers: Sequence[str]) -> None:
        """The live nodes with this node's jobs; this node counts itself in regardless."""
        ordered = tuple(sorted({*peers, self._node_id}))
        with self._lock:
            if ordered != self._peers:
                self._peers, self._owned = ordered, {}

    def drop(self, gone: set[str]) -> None:
        """Nodes found dead between heartbeats: their shares are claimed from now on."""
        with self._lock:
            peers = self._peers
        left = [peer for peer in peers if peer not in gone]
        if len(left) != len(peers):
            self.update(left)

    def mine(self, job: str) -> bool:
        with self._lock:
            peers, owned = self._peers, self._owned
        answer = owned.get(job)
        if answer is None:
            answer = owned[job] = peers[job_lock_key(job) % len(peers)] == self._node_id
        return answer
