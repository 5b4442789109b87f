"""Alert delivery: the events of this node's jobs, handed to their hooks by one node.

A node reads the pending events of the jobs it knows when it is told one was born (a
notification, `Wake.ALERT`), when the heartbeat reads that one's next try has come, or,
on the polling fallback (SQLite, a pooler), every second. It takes each with a
compare-and-set (one node per try), and calls the event's hooks, each in a thread of
its own under a timeout, so a hook that raises or hangs costs this thread at most its
timeout and never a run. A hook that took the event is recorded and not called again;
the others are tried again after a doubling pause, until their tries run out. A call
that passed its timeout still runs: the node keeps the event until it ends, and no node
calls that hook again meanwhile (`hook_calls`); a late success is recorded as one. A
node that dies in the middle leaves the event to be taken again once its hold ends: a
hook may then hear of an event twice, which is why every event carries its key.

A node reads only its own jobs' events (a join on its job set), and gives those of jobs
nobody has run for a day the terminal state `unrouted`, so that retention prunes them.

The node that takes a `paused` event's first try (a job or schedule the scheduler paused
after its failure streak) logs `job_paused_by_failures`, hooks or not: one line a pause,
written here so that the run path stays as it is.

It also records stuck items as events (the same question `check` asks): when the
heartbeat reads that an item is stuck and no event says so yet, or once a minute when
polling; the key makes that once per item however many nodes ask.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from structlog.typing import FilteringBoundLogger

from scheduler import calendars, hooks, metrics
from scheduler.hooks import Hook
from scheduler.model import Event
from scheduler.node.hook_calls import HookCall, Lingering
from scheduler.node.peers import jobs_digest
from scheduler.node.wakeups import Wakeups
from scheduler.registry import Job
from scheduler.states import Delivery, EventKind
from scheduler.store import deliveries as store
from scheduler.store import events as born
from scheduler.store import items as stored_items
from scheduler.store import schedules as stored_schedules
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
# A try whose hook call passed its timeout holds its event this long, renewed every
# third of it while the call runs.
LINGER_HOLD_S = 60.0
# Pending events of a job nobody has run for this long are unrouted; looked for this often.
ORPHANED_AFTER_S = 24 * 3600.0
ORPHAN_SCAN_S = 600.0
# Calendars of dates ending within 30 days are looked for this often.
CALENDAR_SCAN_S = 3600.0


def retry_delay(tries: int) -> float:
    """The pause before the next try, after `tries` tries failed."""
    delay: float = min(FIRST_RETRY_S * 2 ** max(tries - 1, 0), MAX_RETRY_S)
    return delay


def timeout_of(hook: Hook) -> float:
    """A hook's own `timeout` (plus a margin for connecting), or the default."""
    own = getattr(hook, "timeout", None)
    return float(own) + 5.0 if isinstance(own, int | float) and own > 0 else HOOK_TIMEOUT_S


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
        self._job_set = jobs_digest(jobs.values())
        self._next_stuck_scan = 0.0
        self._next_orphan_scan = 0.0
        self._next_calendar_scan = 0.0
        # Tries whose hook calls outlived their timeout, by event key; their holds are
        # renewed at `_next_renewal`.
        self._lingering: dict[str, Lingering] = {}
        self._next_renewal = 0.0
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
            if time.monotonic() >= self._next_orphan_scan:
                self._next_orphan_scan = time.monotonic() + ORPHAN_SCAN_S
                self.unroute_orphans()
            if time.monotonic() >= self._next_calendar_scan:
                self._next_calendar_scan = time.monotonic() + CALENDAR_SCAN_S
                self.record_calendars_ending()
            self._settle_lingering()
            ours = self._deliver_all(self._stopping.is_set)
        except StoreError as error:
            self._log.warning("alerts_failed", error=error.message)
            return POLL_S
        # Told that an event is due, and none was this node's: another node's jobs'.
        self._foreign_until = time.monotonic() + FOREIGN_PAUSE_S if told_due and not ours else 0.0
        wait = SWEEP_S if listening else POLL_S
        if self._lingering:
            wait = min(wait, max(0.0, self._next_renewal - time.monotonic()))
        return wait

    def unroute_orphans(self) -> None:
        """Give the pending events of jobs nobody has run for a day a terminal state."""
        for job, count in store.unroute_orphans(self._database, ORPHANED_AFTER_S).items():
            self._log.warning(
                "alert_unrouted", job=job, events=count, after_h=ORPHANED_AFTER_S / 3600
            )

    def record_calendars_ending(self) -> None:
        """Record, as events, the calendars of dates of this node's jobs that end within
        30 days (once per job, calendar and last date, whichever node looks first)."""
        today = datetime.now(UTC).date()
        found = [
            (job.name, calendar)
            for job in self._jobs.values()
            for calendar in calendars.ending(
                [calendars.Stored(c.name, c.last) for c in job.calendars], today
            )
        ]
        if found:
            born.calendars_ending(self._database, found)
            for name, calendar in found:
                self._log.warning(
                    "calendar_ending",
                    job=name,
                    calendar=calendar.name,
                    last=calendar.last.isoformat() if calendar.last else None,
                )

    def _settle_lingering(self) -> None:
        """Settle the tries whose late calls ended; keep holding the others' events."""
        for key, open_try in list(self._lingering.items()):
            if open_try.ended:
                open_try.settle_calls()
                self._settle(open_try, late=True)  # a fault: the next step tries again
                del self._lingering[key]
        if self._lingering and time.monotonic() >= self._next_renewal:
            rows = [open_try.row for open_try in self._lingering.values()]
            store.renew(self._database, rows, self._node_id, LINGER_HOLD_S)
            self._next_renewal = time.monotonic() + LINGER_HOLD_S / 3

    def _deliver_all(self, stopping: Callable[[], bool]) -> int:
        """Deliver what is due of this node's jobs; how many events that was."""
        rows = store.due(self._database, self._job_set)
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
        if row.tries == 0 and event.kind is EventKind.PAUSED:
            self._log_paused(event, job)
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
        open_try = Lingering(row, [name for name, _ in waiting], list(row.delivered_to), [])
        for name, hook in waiting:
            call = HookCall(name, hook, event, timeout_of(hook), self.wake_in)
            if not call.wait():
                open_try.running.append(call)
            elif call.error is None:
                open_try.delivered.append(name)
            else:
                open_try.errors.append(f"{name}: {call.error}")
        if open_try.running:
            self._linger(open_try)
            return
        self._settle(open_try, late=False)

    def _log_paused(self, event: Event, job: Job) -> None:
        """Log that the scheduler paused a job (or a schedule) after its failure streak:
        once per event, by the node that took its first try (a compare-and-set: one
        node), whether or not a hook hears of it."""
        key = stored_schedules.schedule_key(event.job)
        where = {"job": event.job} if key is None else {"job": job.template, "schedule": key}
        self._log.warning(
            "job_paused_by_failures",
            **where,
            period=event.period.isoformat(),
            streak=event.streak,
            reason=event.detail,
        )

    def _linger(self, open_try: Lingering) -> None:
        """Some calls passed their timeout and still run: record the try so far and keep
        the event (no node calls those hooks again) until they end."""
        row = open_try.row
        tries = row.tries + 1
        # Kept first: whatever the write below meets, the try is settled (and its hold
        # renewed) from here on, fenced on this node's take.
        if not self._lingering:  # else the next renewal is already set, and sooner
            self._next_renewal = time.monotonic() + LINGER_HOLD_S / 3
        self._lingering[row.event.key] = open_try
        still = [
            f"{call.name}: did not return within {call.timeout:g} s; still running"
            for call in open_try.running
        ]
        store.settle(
            self._database,
            row,
            self._node_id,
            state=Delivery.PENDING,
            delivered_to=open_try.delivered,
            error="; ".join(open_try.errors + still),
            retry_in=retry_delay(tries),
            hold_s=LINGER_HOLD_S,
        )
        event = row.event
        self._log.warning(
            "alert_hook_lingering",
            event_key=event.key,
            kind=event.kind.value,
            job=event.job,
            hooks=[call.name for call in open_try.running],
            tries=tries,
        )

    def _settle(self, open_try: Lingering, *, late: bool) -> None:
        """Record how a try went, once every call of it ended: delivered, tried again
        later, or failed once the tries ran out."""
        row, delivered, errors = open_try.row, open_try.delivered, open_try.errors
        event = row.event
        log = self._log.bind(event_key=event.key, kind=event.kind.value, job=event.job)
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
            log.info("alert_delivered", hooks=open_try.hooks, tries=tries, late=late)
            return
        error = "; ".join(errors)
        job = self._jobs[event.job]
        waiting = [
            hook for name, hook in hooks.hooks_for(job.hooks, event.kind) if name in open_try.hooks
        ]
        limit = hooks.max_tries(waiting, DEFAULT_MAX_TRIES)
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
