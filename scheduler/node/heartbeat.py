"""The node's heartbeat: keeps its row in `scheduler_nodes` fresh and its leases alive,
and learns which peers are alive to share out due periods with.

Leases are renewed by the holder's name, so a renewal also finds what this node holds
without knowing it (a claim or start whose reply was lost) and hands it to the
dispatcher to settle. The heartbeat has a stop event of its own: it keeps renewing
while the node drains, and stops only once no run is left to renew. Whether a run is
still this node's by its own clock is the dispatcher's lease watch's to decide, not this
thread's, which may be stuck in a call to a database that does not answer.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

from structlog.typing import FilteringBoundLogger

from scheduler import metrics
from scheduler.model import SILENT_BEATS, ClockReading
from scheduler.node.clock import SKEW_WARNING, Clock
from scheduler.node.liveness import Liveness
from scheduler.node.peers import Peers
from scheduler.node.wakeups import Wakeups
from scheduler.run.dispatcher import Dispatcher
from scheduler.store import beat as store_beat
from scheduler.store import nodes
from scheduler.store.database import Database
from scheduler.store.faults import StoreError
from scheduler.supervision import ANSWERED, SideThread, StopSignal

FIRST_BEAT_S = 1.0
# After a beat that failed, the next is tried this soon: a database that comes back must
# find the leases renewed, and the writes backing off told, while the leases still hold.
FAILED_BEAT_RETRY_S = 0.25
FAILED_BEAT_SAY_S = 5.0
# A peer whose heartbeat is older than this many intervals is no longer given a share
# (/readyz calls a node stale after the same three).


class Heartbeat(SideThread):
    def __init__(
        self,
        *,
        database: Database,
        dispatcher: Dispatcher,
        node_id: str,
        interval: float,
        log: FilteringBoundLogger,
        clock: Clock,
        peers: Peers,
        halt: threading.Event,
        schedule_jobs: tuple[str, ...] = (),
    ) -> None:
        # Its own stop event (it beats on while the node drains); a crash halts the node.
        super().__init__("heartbeat", StopSignal(), log, halt=halt)
        # Soon after start, so that nodes started together learn of each other at once.
        self.first_wait = min(interval, FIRST_BEAT_S)
        self._database = database
        self._dispatcher = dispatcher
        self._peers = peers
        self._node_id = node_id
        self._interval = interval
        self._schedule_jobs = schedule_jobs
        self._clock = clock
        self._skewed = False
        # Since when beats fail (this process's clock), and when that was last said.
        self._failing_since: float | None = None
        self._said_failing = 0.0
        self.last_beat: float | None = None
        # Set by the daemon once it knows them (PostgreSQL, direct connection).
        self.wakeups: Wakeups | None = None
        self.liveness: Liveness | None = None

    @property
    def interval(self) -> float:
        """Seconds between heartbeats; /readyz calls the node stale after three."""
        return self._interval

    def stop(self) -> None:
        """Stop beating (after the node has drained)."""
        self._stopping.set()
        self.wake_in(0.0)

    def step(self) -> float:
        return self._interval if self.beat() else min(self._interval, FAILED_BEAT_RETRY_S)

    def beat(self) -> bool:
        """One transaction: the node's row, its leases, and what the node would otherwise
        poll for (see `store.beat`), handed to the threads that act on it."""
        sent = time.monotonic()
        try:
            beat = store_beat.beat(
                self._database,
                self._node_id,
                alive_within=SILENT_BEATS * self._interval,
                liveness=self.liveness is not None,
                schedule_jobs=self._schedule_jobs,
            )
        except StoreError as error:
            # Tried every quarter second while it fails: said at once, then every few
            # seconds, with how long it has failed.
            if self._failing_since is None:
                self._failing_since = self._said_failing = sent
                self._log.warning("heartbeat_failed", error=error.message)
            elif sent - self._said_failing >= FAILED_BEAT_SAY_S:
                self._said_failing = sent
                failing = round(sent - self._failing_since, 1)
                self._log.warning("heartbeat_failed", error=error.message, failing_s=failing)
            metrics.record_heartbeat(landed=False)
            return False
        metrics.record_heartbeat(landed=True)
        if self._failing_since is not None:
            self._failing_since = None
            ANSWERED.tell()
        self._dispatcher.renewed(beat.held, sent)
        self._calibrated(beat.clock)
        self._peers.update(beat.peers)
        if self.wakeups is not None:
            self.wakeups.beat(beat)
        if not beat.liveness_held and self.liveness is not None:
            self.liveness.doubt()
        self.last_beat = sent
        return True

    def find_peers(self) -> None:
        """Read which nodes with this node's jobs are alive; they share out due periods."""
        alive_within = SILENT_BEATS * self._interval
        self._peers.update(nodes.peers(self._database, self._node_id, alive_within))

    def calibrate(self) -> None:
        """Read the database clock, which this node schedules by; warn when this host's
        own clock is off from it (once, until it is back)."""
        self._calibrated(self._database.clock_reading())

    def _calibrated(self, reading: ClockReading) -> None:
        offset = self._clock.calibrate(reading)
        skewed = abs(offset) > SKEW_WARNING
        if skewed and not self._skewed:
            self._log.warning(
                "clock_skew",
                offset_s=round(offset.total_seconds(), 3),
                host_time=datetime.now(UTC).isoformat(),
            )
        self._skewed = skewed
