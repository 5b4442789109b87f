"""`RunContext`: what a job knows about the run it is doing."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from structlog.typing import FilteringBoundLogger

from scheduler.states import Origin, RunStatus

if TYPE_CHECKING:
    from scheduler.run.items import RunItems
    from scheduler.store.checkpoints import Ended


@dataclass(frozen=True)
class Previous:
    """The newest earlier period of the same job (or schedule) whose run reached an
    outcome: what a run picks up from ("everything since the last one")."""

    period: datetime
    status: RunStatus
    attempt: int
    finished_at: datetime | None
    # What that run's last `checkpoint` stored (None if it stored none).
    checkpoint: Any

    @property
    def succeeded(self) -> bool:
        return self.status is RunStatus.SUCCEEDED

    @classmethod
    def of(cls, ended: Ended) -> Previous:
        state = None if ended.checkpoint is None else json.loads(ended.checkpoint)
        return cls(ended.period, ended.status, ended.attempt, ended.finished_at, state)


@dataclass(frozen=True)
class RunContext:
    """Handed to a job that takes one argument.

    `cancelled` is set when the run must stop early (the node is shutting down
    past its grace period, the lease was lost, the timeout passed); a long job
    should look at it between units of work.
    """

    job: str
    period: datetime
    run_id: str
    attempt: int
    node: str
    origin: Origin
    log: FilteringBoundLogger
    cancelled: threading.Event = field(default_factory=threading.Event)
    # The run's row in the database, for items and checkpoints; None in a context
    # built by hand (a unit test of a job), where those are unavailable.
    run_items: RunItems | None = field(default=None, repr=False, compare=False)
    # The run's trace ids (`trace_id`, `span_id`) when OpenTelemetry traces it: on every
    # log line the job's own code writes, too.
    trace: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    # A schedule created at run time: the keyword arguments it gave the function.
    args: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def schedule(self) -> str | None:
        """The key of the schedule this run is a period of (None: a code-declared job)."""
        return self.job[1:] if self.job.startswith("@") else None

    @property
    def previous(self) -> Previous | None:
        """The newest earlier period of this job (or schedule) whose run reached an
        outcome (succeeded, failed, timed out or abandoned; not one skipped or missed,
        nor one still running), with its status, finish time and last checkpoint; None
        before the first. Read once, when first asked."""
        return self._run_items().previous()

    def key(self, item: str) -> str:
        """A stable key for one effect of this period outside the database: the same for
        every attempt of the period, on every node, and different for any other period,
        job, schedule or `item`. Give it to a downstream that deduplicates on it (an HTTP
        `Idempotency-Key` header, a message's deduplication id, an object's name): an
        attempt that lost its lease and still runs cannot make it act twice."""
        if not isinstance(item, str):
            raise TypeError(f"job {self.job!r}: key: the item must be a string, got {item!r}")
        digest = hashlib.sha256(
            "\0".join((self.job, self.period.isoformat(), item)).encode()
        ).hexdigest()
        return f"cc-{digest[:40]}"

    @property
    def fencing_token(self) -> int:
        """The attempt number: any external write may be fenced on it."""
        return self.attempt

    def once(self, key: str, *, connection: Any = None) -> bool:
        """Record `key` for this job and say whether this run is the first to claim it.

        At most once per key across periods, attempts and replicas. Pass the job's own
        SQLAlchemy Connection or Session (same database) and the record commits or rolls
        back with the job's writes: exactly once for effects in that database.
        """
        return self._run_items().once(key, connection)

    @contextmanager
    def item(self, key: str) -> Iterator[bool]:
        """`with ctx.item(key) as fresh:` claims `key`; act only if `fresh`. The item is done
        when the block ends, released for a retry when it raises, and left claimed (listed
        by `scheduler items JOB --stuck`) when the process dies inside it."""
        with self._run_items().item(key, self.log) as fresh:
            yield fresh

    def checkpoint(self, state: Any) -> None:
        """Store a JSON-serialisable state on the run; a later attempt of this period reads
        it as `last_checkpoint` and can resume there."""
        self._run_items().checkpoint(state)

    @property
    def last_checkpoint(self) -> Any:
        """The state the last `checkpoint` of an earlier attempt of this period stored, or
        None."""
        return self._run_items().last_checkpoint()

    def _run_items(self) -> RunItems:
        if self.run_items is None:
            raise RuntimeError(
                f"job {self.job!r}: this RunContext has no database (it was built by hand), "
                "so once(), item() and checkpoints are unavailable"
            )
        return self.run_items
