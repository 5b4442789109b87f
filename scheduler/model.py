"""The words every layer uses for runs and nodes, as frozen values: no SQL, no threads.

The store takes and returns these; the run path, the node and the commands name runs
with them without importing the store.

- A `Due` is a period a node wants to claim; the claim answers with a `ClaimResult`
  of `Claim`s, the periods this node now holds.
- A claim is one attempt of one run: `RunKey` (run id, attempt) names it, and the
  fence (run id, attempt, holder) guards every write about it.
- A `StartRequest` marks a held run running (`Started` says how that went); a
  `Finish` records how an attempt ended.
- A `Stale` run may be taken over (its lease expired, or its retry is due); a `Held`
  row is one a renewal found in this node's name.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from scheduler.instants import utc_text
from scheduler.states import EventKind, Origin, Reason, RunStatus

# (run id, attempt): the fencing pair that names one attempt of a run.
RunKey = tuple[str, int]
# How far ahead of the database clock a period may be and still be claimed: the host
# clocks of nodes and the database's never agree to the microsecond.
FUTURE_TOLERANCE = timedelta(seconds=2)
# A node that missed this many heartbeats in a row is taken for silent: its peers stop
# leaving it a share, /readyz says it is not ready, `nodes` and `check` call it lost.
SILENT_BEATS = 3
# The jobs digest of a node that runs one job once (run-once, trigger, backfill): never
# anyone's peer, and not a daemon.
ONE_SHOT = "one-shot"
# Job names whose lock key is kept once computed: every start batch takes its jobs'
# locks, and a node has a bounded set of jobs.
LOCK_KEYS_KEPT = 65_536


@functools.lru_cache(maxsize=LOCK_KEYS_KEPT)
def lock_key(job: str) -> int:
    """A stable signed 64-bit key per job, the same on every node and Python version: the
    job's advisory lock, and the hash that shares its periods out among peers."""
    digest = hashlib.blake2b(f"scheduler:{job}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@dataclass(frozen=True)
class ClockReading:
    """The database's time, read by a statement sent at the monotonic instant `sent` and
    answered at `received`: the reading is placed between them, not around a wait for a
    connection or a lock that came before or after the statement."""

    sent: float
    moment: datetime
    received: float

    @classmethod
    def host(cls, moment: datetime, instant: float) -> ClockReading:
        """The host's own clock (SQLite): read at one instant."""
        return cls(instant, moment, instant)


@dataclass(frozen=True)
class NodeIdentity:
    id: str
    name: str
    host: str
    pid: int
    version: str
    # Evidence naming this very process (`scheduler.identity`); None where none exists.
    process: str | None = None

    @property
    def given_name(self) -> str | None:
        """The name `--node-name` gave (the id is it plus a random suffix); None when the
        node took the default, whose name is its id."""
        return None if self.name == self.id else self.name


@dataclass(frozen=True)
class Due:
    """A period that a node wants to claim.

    `overlap_limit` is how many other runs may occupy the job before this period is
    recorded as skipped (1 for `skip`, 2 for `queue`); None allows any (`allow`).
    `start`: a worker is set aside for it, so the claim may mark it running at once if
    it is its job's turn (PostgreSQL; elsewhere it is claimed and started after).
    """

    job: str
    period: datetime
    lease_seconds: float
    overlap_limit: int | None = 1
    origin: Origin = Origin.SCHEDULE
    start: bool = False
    # It falls on a day its job's calendar excludes: recorded skipped (calendar).
    excluded: bool = False


@dataclass(frozen=True)
class Claim:
    """A period this node holds: the fencing triple plus what a dispatcher needs.

    `lease_from` is this process's monotonic clock just before the statement that gave
    the lease was sent: the lease cannot end before `lease_from + lease_seconds` by that
    clock, which is how the holder knows, without asking, until when it is safe.
    """

    id: str
    job: str
    period: datetime
    attempt: int
    holder: str
    lease_seconds: float
    origin: Origin
    lease_from: float = field(default=0.0, compare=False)
    # Earlier attempts of the period that called the function (not those given back
    # before they started): what counts against the job's retries.
    starts_before: int = 0

    @property
    def key(self) -> RunKey:
        """One attempt of one run: a node may hold a later attempt of a run it lost."""
        return (self.id, self.attempt)


@dataclass(frozen=True)
class ClaimResult:
    won: list[Claim]
    skipped: list[Claim]
    reasons: dict[str, Reason] = field(default_factory=dict)
    # Periods not claimed because the database clock has not reached them yet.
    early: list[Due] = field(default_factory=list)
    # Ids of the won runs that the claim marked running (`Due.start`).
    started: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Failure:
    """What went wrong in a run, trimmed for storage. `trace` is the traceback as data
    (each exception of the chain: type, value, frames), for the log; it is not stored."""

    type: str
    message: str
    traceback: str
    trace: tuple[dict[str, Any], ...] = field(default=(), compare=False)


class Started(Enum):
    """How a start went: the function may be called; it waits its turn; it waits for a
    slot of its pool; it is not ours."""

    STARTED = "started"
    WAIT = "wait"
    POOLED = "pooled"
    LOST = "lost"


@dataclass(frozen=True)
class StartRequest:
    """Mark a held run as running. `in_turn` (every overlap but `allow`): the job runs one
    period at a time, oldest first, so only when no other period of it is running and no
    earlier one waits; otherwise WAIT. `pool`: it starts only as the pool's limits
    admit (`pool_limit` and `pool_per_key` are the code's, for a pool with no row yet);
    otherwise POOLED."""

    claim: Claim
    in_turn: bool = False
    pool: str | None = None
    pool_key: str | None = None
    pool_limit: int = 1
    pool_per_key: int | None = None


@dataclass(frozen=True)
class QueueRequest:
    """Mark a held run as handed to a task queue (`queued`), its lease becoming the
    deadline (`deadline_s` from now) by which a worker must start it. `in_turn` as for a
    start: a queued run occupies its job like a running one."""

    claim: Claim
    queue: str
    deadline_s: float
    in_turn: bool = False


class Refusal(Enum):
    """Why a worker may not start a delivered run: the message is stale."""

    GONE = "gone"  # no such run
    SUPERSEDED = "superseded"  # a later attempt exists: the message's attempt was retaken
    SETTLED = "settled"  # the run has ended
    TAKEN = "taken"  # another delivery of this message started it
    EXPIRED = "expired"  # still queued, but its deadline passed: a node will re-send it
    UNSENT = "unsent"  # not queued (yet): the sender's write has not landed


@dataclass(frozen=True)
class Delivery:
    """What a worker's start found: the run it now holds, or why it may not start it."""

    claim: Claim | None
    refusal: Refusal | None = None
    status: RunStatus | None = None
    queued_ms: int | None = None


@dataclass(frozen=True)
class Finish:
    """How an attempt ended. `retry_in` marks the period for another attempt after that
    many seconds; any node's recovery pass may take it then. `lingering`: the function
    still runs (a thread past its timeout), so the holder keeps the lease (and renews
    it) until the function returns, and the retry waits for that. `waiting_only`: only
    if the run has not started (a claim given back); a start that landed first keeps it."""

    claim: Claim
    status: RunStatus
    duration_ms: int | None
    failure: Failure | None = None
    reason: Reason | None = None
    retry_in: float | None = None
    lingering: bool = False
    waiting_only: bool = False
    # The job's failure-streak policy (`alert_after_failures`, `pause_after_failures`),
    # applied where the outcome is written.
    alert_after: int = 1
    pause_after: int | None = None

    @property
    def final_failure(self) -> bool:
        """A failure (or timeout) with no attempt to come: it counts in a streak."""
        return self.status in (RunStatus.FAILED, RunStatus.TIMED_OUT) and self.retry_in is None


@dataclass(frozen=True)
class Stale:
    """A run another node may take over: its lease expired, or it waits for a retry."""

    id: str
    job: str
    period: datetime
    attempt: int
    holder: str | None
    status: RunStatus
    lease_seconds: float
    origin: Origin
    expired: bool
    # Attempts that called the function: what counts against the job's retries.
    started_attempts: int = 0


@dataclass(frozen=True)
class Held:
    """A row this node's name is on with a live lease, as a renewal found it."""

    id: str
    job: str
    period: datetime
    attempt: int
    status: RunStatus
    lease_seconds: float
    origin: Origin
    started_attempts: int

    @property
    def key(self) -> RunKey:
        return (self.id, self.attempt)

    def as_claim(self, holder: str, lease_from: float) -> Claim:
        """The row as a claim to run (it is `claimed`: this attempt has not started)."""
        return Claim(
            self.id,
            self.job,
            self.period,
            self.attempt,
            holder,
            self.lease_seconds,
            self.origin,
            lease_from,
            self.started_attempts,
        )


@dataclass(frozen=True)
class Entry:
    """One period to write in bulk (catch-up, backfill, a manual run): claimed by this
    node to run, or recorded skipped or missed."""

    period: datetime
    status: RunStatus
    reason: Reason | None = None


@dataclass(frozen=True)
class Written:
    """What a bulk write did: the claimed entries this node won, and the entries it left
    alone because the database clock has not reached their period yet."""

    won: list[Claim] = field(default_factory=list)
    early: list[Entry] = field(default_factory=list)


@dataclass(frozen=True)
class JobRow:
    """A job as the jobs table has it: its schedule, pause state and catch-up watermark."""

    name: str
    cron: str
    timezone: str
    first_seen: datetime
    last_seen: datetime
    paused: bool
    paused_at: datetime | None
    lease_seconds: float | None
    timeout_seconds: float | None
    retries: int | None
    alert_after_seconds: float | None
    resumed_at: datetime | None = None
    caught_up_to: datetime | None = None
    schedule_changed_at: datetime | None = None
    previous_cron: str | None = None
    previous_timezone: str | None = None
    # Why the scheduler paused it (`pause_after_failures`); None for an operator's pause.
    pause_reason: str | None = None
    # Its calendars as JSON [{name, last}] (`scheduler.calendars.stored`).
    calendars: str | None = None


@dataclass(frozen=True)
class PauseRow:
    """One pause of a job: [paused_at, resumed_at), resumed_at None while it lasts."""

    job: str
    paused_at: datetime
    resumed_at: datetime | None


@dataclass(frozen=True)
class Event:
    """Something an alert hook hears about, once per fleet: `key` names it for good, so a
    receiver that gets it twice (delivery is at least once) can tell."""

    job: str
    period: datetime
    kind: EventKind
    subject: str = ""
    run_id: str | None = None
    attempt: int | None = None
    reason: str | None = None
    detail: str | None = None
    created_at: datetime | None = None
    # `failed`: the periods failed in a row when it was born; `recovered`: how many the
    # streak it ends had.
    streak: int | None = None

    @property
    def key(self) -> str:
        """`job/2026-12-01T12:05:00Z/kind`, then `/subject` when the kind has several
        events a period (a retry's attempt, a stuck item's key)."""
        base = f"{self.job}/{utc_text(self.period)}/{self.kind.value}"
        return f"{base}/{self.subject}" if self.subject else base

    def as_dict(self) -> dict[str, Any]:
        """The event as JSON-ready data (the webhook's payload)."""
        return {
            "key": self.key,
            "kind": self.kind.value,
            "job": self.job,
            "period": utc_text(self.period),
            "subject": self.subject or None,
            "run_id": self.run_id,
            "attempt": self.attempt,
            "reason": self.reason,
            "detail": self.detail,
            "streak": self.streak,
            "created_at": utc_text(self.created_at) if self.created_at else None,
        }


@dataclass(frozen=True)
class Spent:
    """A job's catch-up budget as the runs table tells it: how many catch-up runs were
    claimed in the budget's window, and when the newest was."""

    runs: int = 0
    last: datetime | None = None
