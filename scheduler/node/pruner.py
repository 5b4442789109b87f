"""The daemon's own retention: prune old history now and then, when `--retention` is set.

Every node with a retention prunes; the deletes are idempotent and batched, so
replicas pruning at once only find less to do.
"""

from __future__ import annotations

import random
import threading
from datetime import timedelta

from structlog.typing import FilteringBoundLogger

from scheduler.durations import parse_duration
from scheduler.errors import UserError
from scheduler.store import prune
from scheduler.store.database import Database
from scheduler.store.faults import StoreError
from scheduler.supervision import SideThread

PRUNE_INTERVAL = timedelta(hours=1)


def parse_retention(option: str, raw: str) -> timedelta:
    """A retention age: a positive duration such as 90d."""
    try:
        age = parse_duration(raw)
    except ValueError as error:
        raise UserError(f"{option}: {error}") from None
    if not age:
        raise UserError(f"{option}: must be more than zero, got {raw!r}")
    return age


class Pruner(SideThread):
    """Prunes at start, then about every PRUNE_INTERVAL (spread so replicas drift apart)."""

    def __init__(
        self,
        *,
        database: Database,
        retention: timedelta,
        stop: threading.Event,
        log: FilteringBoundLogger,
        interval: timedelta = PRUNE_INTERVAL,
    ) -> None:
        super().__init__("pruner", stop, log)
        self._database = database
        self._retention = retention
        self._interval = interval.total_seconds()

    def step(self) -> float:
        self.prune_once()
        return self._interval * random.uniform(0.9, 1.1)

    def prune_once(self) -> None:
        try:
            cutoff = prune.cutoff_for(self._database, self._retention)
            result = prune.prune(self._database, cutoff, keep_going=self._keep_going)
        except StoreError as error:
            self._log.warning("prune_failed", error=error.message)
            return
        if result.runs or result.items or result.events or result.schedules:
            self._log.info(
                "history_pruned",
                cutoff=cutoff.isoformat(),
                runs=result.runs,
                attempts=result.attempts,
                items=result.items,
                stuck_items_kept=result.stuck_kept,
                events=result.events,
                schedules=result.schedules,
            )

    def _keep_going(self) -> bool:
        return not self._stopping.is_set()
