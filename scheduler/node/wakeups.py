"""How a node learns that something needs doing, without asking every second.

Two modes, chosen at start and said in the log (`wakeups`):

- `events` (PostgreSQL, direct connection): the liveness session LISTENs; other nodes'
  writes notify it (`store.wakeups`): a retry scheduled, a lease ended, a job resumed,
  a request written, an alert event born, a node gone. A watch thread waits on the next
  node's liveness lock and tells everyone the moment it goes. The recovery, request and
  alert threads sleep until such a wake-up or a deadline they know of; every heartbeat
  (one transaction) re-reads those deadlines (and whether an item is stuck that no
  event reports yet), so a notification missed costs at most one heartbeat interval.
- `poll` (SQLite, or PostgreSQL behind a pooler, where a session cannot LISTEN): the
  recovery loop looks every `--recovery-interval`, requests and alert events every
  second, stuck items every minute, as before.

While the listening session is down (being taken again), the node polls.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from structlog.typing import FilteringBoundLogger

from scheduler.model import Due
from scheduler.store.beat import Beat
from scheduler.store.nodes import Watched
from scheduler.store.wakeups import Wake, claimed_token, parse


class Mode(StrEnum):
    EVENTS = "events"
    POLL = "poll"


class Wakeable(Protocol):
    def wake_in(self, seconds: float = 0.0) -> None: ...


class GoneWatcher(Protocol):
    def notice_gone(self, nodes: list[str]) -> None: ...

    def seen_held(self, ring: list[Watched], own_key: int) -> None: ...

    def deadline_in(self, seconds: float) -> None: ...

    def wake_in(self, seconds: float = 0.0) -> None: ...


class AlertWatcher(Protocol):
    def wake_in(self, seconds: float = 0.0) -> None: ...

    def due_in(self, seconds: float) -> None: ...

    def stuck_reported_late(self) -> None: ...


class ScheduleWatcher(Protocol):
    def wake_in(self, seconds: float = 0.0) -> None: ...


class CatchUpWatcher(Protocol):
    def deferred_heard(self) -> None: ...


class RingWatcher(Protocol):
    def ring(self, nodes: list[Watched]) -> None: ...


class ClaimsHeard:
    """Periods other nodes' claims said they claimed (`claimed` notifications), kept for
    a while: a period of a peer's share heard of here needs no read to know it has a row.
    Never the record: what was not heard is read, as without notifications."""

    KEEP_S = 120.0

    def __init__(self) -> None:
        self._heard: dict[str, float] = {}
        self._lock = threading.Lock()
        self._pruned_at = time.monotonic()

    def add(self, tokens: frozenset[str]) -> None:
        now = time.monotonic()
        with self._lock:
            for token in tokens:
                self._heard[token] = now
            if now - self._pruned_at > self.KEEP_S:
                self._heard = {t: at for t, at in self._heard.items() if now - at < self.KEEP_S}
                self._pruned_at = now

    def heard(self, job: str, period: datetime) -> bool:
        with self._lock:
            return claimed_token(job, period) in self._heard

    def unheard(self, items: list[Due]) -> list[Due]:
        """Of these periods, those no notification told of (all of them, at no cost,
        when none was heard lately: a burst's claims are too big to be told of)."""
        with self._lock:
            heard = self._heard
            if not heard:
                return items
            return [item for item in items if claimed_token(item.job, item.period) not in heard]


class Wakeups:
    """Hands what the heartbeat read and what the listening session heard to the threads
    that act on it."""

    def __init__(self, log: FilteringBoundLogger) -> None:
        self.mode = Mode.POLL
        self._log = log
        self._listening = threading.Event()
        self.recovery: GoneWatcher | None = None
        self.requests: Wakeable | None = None
        self.alerts: AlertWatcher | None = None
        self.watch: RingWatcher | None = None
        self.schedules: ScheduleWatcher | None = None
        self.catch_up: CatchUpWatcher | None = None
        self.claims = ClaimsHeard()

    def choose(self, mode: Mode, why: str) -> None:
        """At start: events when the node holds a listening session of its own."""
        self.mode = mode
        if mode is Mode.EVENTS:
            self._listening.set()
        self._log.info("wakeups", mode=mode.value, why=why)

    @property
    def listening(self) -> bool:
        """Notifications reach this node now: the threads may sleep until told."""
        return self._listening.is_set()

    def set_listening(self, listening: bool) -> None:
        """The listening session was lost (poll meanwhile) or is back."""
        if listening == self.listening or self.mode is Mode.POLL:
            return
        if listening:
            self._listening.set()
        else:
            self._listening.clear()
        self._log.info("wakeups", mode=(Mode.EVENTS if listening else Mode.POLL).value)
        # Whatever was said meanwhile went unheard: look now.
        for thread in (self.recovery, self.requests, self.alerts, self.schedules):
            if thread is not None:
                thread.wake_in(0.0)
        if self.catch_up is not None:
            self.catch_up.deferred_heard()

    def heard(self, payload: str) -> None:
        """A notification arrived on the listening session."""
        heard = parse(payload)
        if heard is None:
            return
        if heard.kind is Wake.REQUEST and self.requests is not None:
            self.requests.wake_in(heard.after)
        elif heard.kind in (Wake.RECOVERY, Wake.GONE) and self.recovery is not None:
            self.recovery.wake_in(heard.after)
        elif heard.kind is Wake.ALERT and self.alerts is not None:
            self.alerts.wake_in(heard.after)
        elif heard.kind is Wake.SCHEDULE and self.schedules is not None:
            self.schedules.wake_in(heard.after)
        elif heard.kind is Wake.CATCHUP and self.catch_up is not None:
            self.catch_up.deferred_heard()
        elif heard.kind is Wake.CLAIMED:
            self.claims.add(heard.tokens)

    def beat(self, beat: Beat) -> None:
        """What a heartbeat read: deadlines and nodes gone, in case a notice was missed."""
        if self.recovery is not None:
            if beat.recovery_in is not None:
                self.recovery.deadline_in(beat.recovery_in)
            if beat.gone:
                self.recovery.notice_gone(beat.gone)
            if beat.liveness_held and beat.liveness_key is not None:
                self.recovery.seen_held(beat.ring, beat.liveness_key)
        if beat.requests_waiting and self.requests is not None:
            self.requests.wake_in(0.0)
        if self.alerts is not None:
            if beat.stuck_unreported:
                self.alerts.stuck_reported_late()
            if beat.alerts_in is not None:
                self.alerts.due_in(max(0.0, beat.alerts_in))
        if self.schedules is not None and beat.schedules_in is not None:
            self.schedules.wake_in(max(0.0, beat.schedules_in))
        if self.watch is not None:
            self.watch.ring(beat.ring)
