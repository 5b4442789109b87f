"""Alert delivery: the events of this node's jobs, handed to their hooks by one node.

A node reads the pending events of the jobs it knows when it is told one was born (a
notification, `Wake.ALERT`), when the heartbeat reads that one's next try has come, or,
on the polling fallback (SQLite, a pooler), every second. It takes each with a
compare-and-set (one node per try), and calls the event's hooks, each in a thread of
its own under a timeout, so a hook that raises or hangs costs this thread at most its
timeout and never a run. A hook that took the event is recorded and not called again;
the others are tried again after a doubling pause, until their tries run out. A node
that dies in the middle leaves the event to be taken again once its hold ends: a hook
may then hear of an event twice, which is why every event carries its key.

It also records stuck items as events (the same question `check` asks): when the
heartbeat reads that an item is stuck and no event says so yet, or once a minute when
polling; the key makes that once per item however many nodes ask.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from structlog.typing import FilteringBoundLogger

from scheduler import hooks, metrics
from scheduler.hooks import Hook
from scheduler.model import Event
from scheduler.node.wakeups import Wakeups
from scheduler.registry import Job
from scheduler.states import Delivery
from scheduler.store import deliveries as store
from scheduler.store import events as born
from scheduler.store import items as stored_items
from scheduler.store.database import Database
from scheduler.store.deliveries import EventRow
from scheduler.store.faults import StoreError
from scheduler.supervision import SideThread

POLL_S = 1.0
# Listening: the slow sweep behind the notifications and the heartbeat's reads.
SWEEP_S = 300.0
STUCK_SCAN_S = 60.0
# After a look that found only other nodes' events due (jobs this node does not run),
# the heartbeat's "an event is due" is not taken up again for this long: such an event
# would otherwise cost a query every beat until a node that runs its job delivers it.
FOREIGN_PAUSE_S = 60.0
STUCK_LIMIT = 200
# A hook without a timeout of its own (a webhook has one) gets this long per call.
HOOK_TIMEOUT_S = 30.0
# The pause after the first failed try; it doubles up to the ceiling.
FIRST_RETRY_S = 10.0
MAX_RETRY_S = 15 * 60.0
DEFAULT_MAX_TRIES = 6


def retry_delay(tries: int) -> float:
    """The pause before the next try, after `tries` tries failed."""
    delay: float = min(FIRST_RETRY_S * 2 ** max(tries - 1, 0), MAX_RETRY_S)
    return delay


def timeout_of(hook: Hook) -> float:
    """A hook's own `timeout` (plus a margin for connecting), or the default."""
    own = getattr(hook, "timeout", None)
    return float(own) + 5.0 if isinstance(own, int | float) and own > 0 else HOOK_TIMEOUT_S


@dataclass(frozen=True)
class Call:
    """How one hook call went: None when it took the event, or why not."""

    error: str | None


def call_hook(name: str, hook: Hook, event: Event, timeout: float) -> Call:
    """Call the hook in a thread of its own and wait at most `timeout`; a thread that does
    not return is left behind (a daemon), never waited for."""
    outcome: list[Call] = []

    def target() -> None:
        try:
            hook(event)
        except Exception as error:  # noqa: BLE001 - a hook's failure is data
            outcome.append(Call(f"{type(error).__name__}: {error}"))
        else:
            outcome.append(Call(None))

    thread = threading.Thread(target=target, name=f"hook:{name}"[:60], daemon=True)
    thread.start()
    thread.join(timeout)
    if not outcome:
        return Call(f"did not return within {timeout:g} s")
    return outcome[0]


class Alerts(SideThread):
    """Delivers the events of this node's jobs, and records stuck items as events."""

    def __init__(
        self,
        *,
        database: Database,
        jobs: Mapping[str, Job],
        node_id: str,
        stop: threading.Event,
        log: FilteringBoundLogger,
        wakeups: Wakeups | None = None,
    ) -> None:
        super().__init__("alerts", stop, log)
        self._database = database
        self._jobs = jobs
        self._node_id = node_id
        self._wakeups = wakeups
        if wakeups is not None:
            wakeups.alerts = self
        self._next_stuck_scan = 0.0
        self._foreign_until = 0.0
        self._foreign_stuck_until = 0.0
        # The heartbeat said an event's try has come, since the last step.
        self._told_due = False

    def due_in(self, seconds: float) -> None:
        """The heartbeat read that some event's try comes in `seconds`."""
        if time.monotonic() >= self._foreign_until:
            self._told_due = self._told_due or seconds <= 0
            self.wake_in(seconds)

    def stuck_reported_late(self) -> None:
        """The heartbeat read a stuck item no event tells of: look now (unless the last
        look found only other nodes' jobs' stuck items: then in a minute at most)."""
        if time.monotonic() < self._foreign_stuck_until:
            return
        self._next_stuck_scan = 0.0
        self.wake_in(0.0)

    def step(self) -> float:
        listening = self._wakeups is not None and self._wakeups.listening
        told_due, self._told_due = self._told_due, False
        try:
            if time.monotonic() >= self._next_stuck_scan:
                # Listening, the next scan waits for the heartbeat to see a stuck item.
                self._next_stuck_scan = time.monotonic() + (SWEEP_S if listening else STUCK_SCAN_S)
                own_stuck, seen = self.record_stuck()
                foreign_only = seen > 0 and own_stuck == 0
                self._foreign_stuck_until = (
                    time.monotonic() + FOREIGN_PAUSE_S if foreign_only else 0.0
                )
            ours = self._deliver_all(self._stopping.is_set)
        except StoreError as error:
            self._log.warning("alerts_failed", error=error.message)
            return POLL_S
        # Told that an event is due, and none was this node's: another node's jobs'.
        self._foreign_until = time.monotonic() + FOREIGN_PAUSE_S if told_due and not ours else 0.0
        return SWEEP_S if listening else POLL_S

    def _deliver_all(self, stopping: Callable[[], bool]) -> int:
        """Deliver what is due of this node's jobs; how many events that was."""
        rows = store.due(self._database, self._jobs)
        for row in rows:
            if stopping():
                break
            self.deliver(row)
        return len(rows)

    def deliver_due(self) -> None:
        """One pass over what is due now, without the thread (a one-shot command about to
        exit: what fails here waits for the next one, or a daemon)."""
        try:
            self._deliver_all(lambda: False)
        except StoreError as error:
            self._log.warning("alerts_failed", error=error.message)

    def record_stuck(self) -> tuple[int, int]:
        """Record this node's jobs' stuck items as events; how many were its jobs', and
        how many stuck items it saw in all."""
        found = stored_items.list_items(self._database, None, stuck_only=True, limit=STUCK_LIMIT)
        ours = [
            (row.job, row.period, row.key, row.run_id, row.attempt)
            for row in found
            if row.job in self._jobs
        ]
        born.stuck(self._database, ours)
        return len(ours), len(found)

    def deliver(self, row: EventRow) -> None:
        """Take the event's next try and call the hooks that have not taken it yet."""
        event, job = row.event, self._jobs[row.event.job]
        routes = hooks.hooks_for(job.hooks, event.kind)
        waiting = [(name, hook) for name, hook in routes if name not in row.delivered_to]
        hold = sum(timeout_of(hook) for _, hook in waiting) + 30.0
        if not store.take(self._database, row, self._node_id, hold):
            return  # another node has this try
        log = self._log.bind(event_key=event.key, kind=event.kind.value, job=event.job)
        if not routes:
            store.settle(
                self._database,
                row,
                self._node_id,
                state=Delivery.UNROUTED,
                delivered_to=(),
                error=None,
            )
            return
        delivered = list(row.delivered_to)
        errors = []
        for name, hook in waiting:
            call = call_hook(name, hook, event, timeout_of(hook))
            if call.error is None:
                delivered.append(name)
            else:
                errors.append(f"{name}: {call.error}")
        tries = row.tries + 1
        if not errors:
            store.settle(
                self._database,
                row,
                self._node_id,
                state=Delivery.DELIVERED,
                delivered_to=delivered,
                error=None,
            )
            metrics.record_delivery("delivered")
            log.info("alert_delivered", hooks=[name for name, _ in waiting], tries=tries)
            return
        error = "; ".join(errors)
        limit = hooks.max_tries([hook for _, hook in waiting], DEFAULT_MAX_TRIES)
        if tries >= limit:
            store.settle(
                self._database,
                row,
                self._node_id,
                state=Delivery.FAILED,
                delivered_to=delivered,
                error=error,
            )
            metrics.record_delivery("gave_up")
            log.error("alert_gave_up", error=error, tries=tries)
            return
        retry_in = retry_delay(tries)
        store.settle(
            self._database,
            row,
            self._node_id,
            state=Delivery.PENDING,
            delivered_to=delivered,
            error=error,
            retry_in=retry_in,
        )
        metrics.record_delivery("retrying")
        log.warning("alert_delivery_failed", error=error, tries=tries, retry_in_s=retry_in)
        self.wake_in(retry_in)  # nobody will say when its next try comes
