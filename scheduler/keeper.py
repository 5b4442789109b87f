"""The node's heartbeat: keeps its row in `scheduler_nodes` fresh and its leases alive,
and learns which peers are alive to share out due periods with.

A run whose lease could not be renewed for a whole lease TTL is treated as lost:
another node may already have taken it.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

from sqlalchemy.exc import DBAPIError
from structlog.typing import FilteringBoundLogger

from scheduler.clock import SKEW_WARNING, Clock
from scheduler.dispatch import Dispatcher
from scheduler.shares import Shares
from scheduler.store import nodes, runs
from scheduler.store.database import Database, first_line
from scheduler.store.runs import RunKey
from scheduler.supervision import SideThread

FIRST_BEAT_S = 1.0
# A peer whose heartbeat is older than this many intervals is no longer given a share
# (/readyz calls a node stale after the same three).
PEER_STALE_BEATS = 3


class Keeper(SideThread):
    def __init__(
        self,
        *,
        database: Database,
        dispatcher: Dispatcher,
        node_id: str,
        interval: float,
        stop: threading.Event,
        log: FilteringBoundLogger,
        clock: Clock,
        shares: Shares,
    ) -> None:
        super().__init__("keeper", stop, log)
        # Soon after start, so that nodes started together learn of each other at once.
        self.first_wait = min(interval, FIRST_BEAT_S)
        self._database = database
        self._dispatcher = dispatcher
        self._shares = shares
        self._node_id = node_id
        self._interval = interval
        self._clock = clock
        self._skewed = False
        self._renewed_at: dict[RunKey, float] = {}
        self.last_beat: float | None = None

    @property
    def interval(self) -> float:
        """Seconds between heartbeats; /readyz calls the node stale after three."""
        return self._interval

    def step(self) -> float:
        self.beat()
        return self._interval

    def beat(self) -> None:
        held = self._dispatcher.held()
        now = time.monotonic()
        try:
            nodes.heartbeat(self._database, self._node_id)
            renewed = runs.renew_leases(self._database, held)
            self.calibrate()
            self.find_peers()
        except DBAPIError as error:
            self._log.warning("heartbeat_failed", error=first_line(error.orig))
            renewed = set()
            for claim in held:
                since = self._renewed_at.setdefault(claim.key, now)
                if now - since >= claim.lease_seconds:
                    self._dispatcher.lose(claim.key)
            return
        self.last_beat = now
        for claim in held:
            if claim.key in renewed:
                self._renewed_at[claim.key] = now
            else:
                self._dispatcher.lose(claim.key)
        self._renewed_at = {key: self._renewed_at[key] for key in renewed}

    def find_peers(self) -> None:
        """Read which nodes with this node's jobs are alive; they share out due periods."""
        alive_within = PEER_STALE_BEATS * self._interval
        self._shares.update(nodes.peers(self._database, self._node_id, alive_within))

    def calibrate(self) -> None:
        """Measure this host's clock against the database's; warn once when they drift apart."""
        before = datetime.now(UTC)
        database_time = self._database.read_clock()
        offset = self._clock.calibrate(before, database_time, datetime.now(UTC))
        skewed = abs(offset) > SKEW_WARNING
        if skewed and not self._skewed:
            self._log.warning("clock_skew", offset_s=round(offset.total_seconds(), 3))
        self._skewed = skewed
