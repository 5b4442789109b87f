"""`RunContext`: what a job knows about the run it is doing."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from structlog.typing import FilteringBoundLogger

from scheduler.states import Origin

if TYPE_CHECKING:
    from scheduler.run.items import RunItems


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
