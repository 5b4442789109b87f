"""The node's heartbeat: keeps its row in `scheduler_nodes` fresh and its leases alive.

A run whose lease could not be renewed for a whole lease TTL is treated as lost:
another node may already have taken it.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import structlog
from sqlalchemy.exc import DBAPIError

from scheduler.clock import SKEW_WARNING, Clock
from scheduler.dispatch import Dispatcher
from scheduler.store import nodes, runs
from scheduler.store.database import Database, first_line
from scheduler.store.runs import RunKey
from scheduler.supervision import SideThread


class Keeper(SideThread):
    def __init__(
        self,
        *,
        database: Database,
        dispatcher: Dispatcher,
        node_id: str,
        interval: float,
        stop: threading.Event,
        log: structlog.stdlib.BoundLogger,
        clock: Clock,
    ) -> None:
        super().__init__("keeper", stop, log)
        self.first_wait = interval
        self._database = database
        self._dispatcher = dispatcher
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

    def calibrate(self) -> None:
        """Measure this host's clock against the database's; warn once when they drift apart."""
        before = datetime.now(UTC)
        database_time = self._database.read_clock()
        offset = self._clock.calibrate(before, database_time, datetime.now(UTC))
        skewed = abs(offset) > SKEW_WARNING
        if skewed and not self._skewed:
            self._log.warning("clock_skew", offset_s=round(offset.total_seconds(), 3))
        self._skewed = skewed
