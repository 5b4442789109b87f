"""The node's heartbeat: keeps its row in `scheduler_nodes` fresh and its leases alive.

A run whose lease could not be renewed for a whole lease TTL is treated as lost:
another node may already have taken it.
"""

from __future__ import annotations

import threading
import time

import structlog
from sqlalchemy.exc import DBAPIError

from scheduler.dispatch import Dispatcher
from scheduler.store import nodes, runs
from scheduler.store.database import Database, first_line


class Keeper(threading.Thread):
    def __init__(
        self,
        *,
        database: Database,
        dispatcher: Dispatcher,
        node_id: str,
        interval: float,
        stop: threading.Event,
        log: structlog.stdlib.BoundLogger,
    ) -> None:
        super().__init__(name="keeper", daemon=True)
        self._database = database
        self._dispatcher = dispatcher
        self._node_id = node_id
        self._interval = interval
        self._stop = stop
        self._log = log
        self._renewed_at: dict[str, float] = {}
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            while not self._stop.wait(self._interval):
                self.beat()
        except Exception as error:  # noqa: BLE001 - supervision: any crash stops the node
            self.failure = error
            self._log.exception("keeper_crashed")
            self._stop.set()

    def beat(self) -> None:
        held = self._dispatcher.held()
        now = time.monotonic()
        try:
            nodes.heartbeat(self._database, self._node_id)
            renewed = runs.renew_leases(self._database, held)
        except DBAPIError as error:
            self._log.warning("heartbeat_failed", error=first_line(error.orig))
            renewed = set()
            for claim in held:
                since = self._renewed_at.setdefault(claim.id, now)
                if now - since >= claim.lease_seconds:
                    self._dispatcher.lose(claim.id)
            return
        for claim in held:
            if claim.id in renewed:
                self._renewed_at[claim.id] = now
            else:
                self._dispatcher.lose(claim.id)
        self._renewed_at = {run_id: self._renewed_at[run_id] for run_id in renewed}
