"""How a node learns that something needs doing, without asking every second.

Two modes, chosen at start and said in the log (`wakeups`):

- `events` (PostgreSQL, direct connection): the liveness session LISTENs; other nodes'
  writes notify it (`store.wakeups`): a retry scheduled, a lease ended, a job resumed,
  a request written, a node gone. A watch thread waits on the next node's liveness lock
  and tells everyone the moment it goes. The recovery and request threads sleep until
  such a wake-up or a deadline they know of; every heartbeat (one transaction) re-reads
  those deadlines, so a notification missed costs at most one heartbeat interval.
- `poll` (SQLite, or PostgreSQL behind a pooler, where a session cannot LISTEN): the
  recovery loop looks every `--recovery-interval`, requests every second, as before.

While the listening session is down (being taken again), the node polls.
"""

from __future__ import annotations

import threading
from enum import StrEnum
from typing import Protocol

from structlog.typing import FilteringBoundLogger

from scheduler.store.beat import Beat
from scheduler.store.nodes import Watched
from scheduler.store.wakeups import Wake, parse


class Mode(StrEnum):
    EVENTS = "events"
    POLL = "poll"


class Wakeable(Protocol):
    def wake_in(self, seconds: float = 0.0) -> None: ...


class GoneWatcher(Protocol):
    def notice_gone(self, nodes: list[str]) -> None: ...

    def deadline_in(self, seconds: float) -> None: ...

    def wake_in(self, seconds: float = 0.0) -> None: ...


class RingWatcher(Protocol):
    def ring(self, nodes: list[Watched]) -> None: ...


class Wakeups:
    """Hands what the heartbeat read and what the listening session heard to the threads
    that act on it."""

    def __init__(self, log: FilteringBoundLogger) -> None:
        self.mode = Mode.POLL
        self._log = log
        self._listening = threading.Event()
        self.recovery: GoneWatcher | None = None
        self.requests: Wakeable | None = None
        self.watch: RingWatcher | None = None

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
        for thread in (self.recovery, self.requests):
            if thread is not None:
                thread.wake_in(0.0)

    def heard(self, payload: str) -> None:
        """A notification arrived on the listening session."""
        heard = parse(payload)
        if heard is None:
            return
        if heard.kind is Wake.REQUEST and self.requests is not None:
            self.requests.wake_in(heard.after)
        elif heard.kind in (Wake.RECOVERY, Wake.GONE) and self.recovery is not None:
            self.recovery.wake_in(heard.after)

    def beat(self, beat: Beat) -> None:
        """What a heartbeat read: deadlines and nodes gone, in case a notice was missed."""
        if self.recovery is not None:
            if beat.recovery_in is not None:
                self.recovery.deadline_in(beat.recovery_in)
            if beat.gone:
                self.recovery.notice_gone(beat.gone)
        if beat.requests_waiting and self.requests is not None:
            self.requests.wake_in(0.0)
        if self.watch is not None:
            self.watch.ring(beat.ring)
