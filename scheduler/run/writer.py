"""The start and finish writes of the runs a node holds, sent together.

Starts: the Starter sends a batch with `start_many`; a run that starts itself (the slow
path) waits for its own answer, but such starts at the same moment travel together
(group commit). Outcomes: the worker thread hands the outcome over and moves on to the
next run; one writer thread sends the outcomes that arrive within OUTCOME_LINGER_S of
the first in one statement, retries through database faults, and tells each run how
its outcome was settled: their lines go out in one write, then the runs end. A burst
of short runs so costs a statement per batch, not two transactions a run, and no
worker waits on a commit after its job has returned.

Begun bodies: a worker says so once it calls the function (`began`), and the writer
writes it with the next batch, unless the run's outcome is in that batch too (an
outcome says as much, but for a body that outlives its timeout). Only then may a
period of the job skip behind the run: a start's commit whose reply was lost says
nothing about the body (see `store.fence`).

The writer thread outlives any fault: a lost connection or a pool that ran dry is
retried, a row the database refuses is written alone (and given up alone), and a bug
in one callback is logged. Once the node is closing it no longer lingers.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from enum import Enum
from functools import partial

from structlog.typing import FilteringBoundLogger

from scheduler import logs
from scheduler.model import Claim, Finish, QueueRequest, Started, StartRequest
from scheduler.run.groupcommit import MAX_BATCH, GroupCommit
from scheduler.store import handoff, writes
from scheduler.store.database import Database
from scheduler.store.faults import StoreError, StoreRejectedError
from scheduler.supervision import Backoff, Worker

# The outcome writer waits this long after the first outcome for others to join it:
# when many runs end together, fewer and larger statements leave more of the machine to
# the starts of the runs still queued (bench c measures it). A run ends (its
# successor may start) that much later, far below any period.
OUTCOME_LINGER_S = 0.05


class Settled(Enum):
    """How an outcome write ended."""

    WRITTEN = "written"  # the database has it
    REFUSED = "refused"  # the fence refused it: the run is no longer this attempt's
    LOST = "lost"  # given up: the node closes and the database stays away, or it is refused


# Told, once per outcome, how its write was settled (on the writer thread). What it
# returns is called once the lines of the writer's whole batch are out (`_tell`).
Then = Callable[[Settled], Callable[[], None]]


def refused_data(error: Exception) -> bool:
    """A failure that one request's data may have caused, not the connection."""
    return isinstance(error, StoreRejectedError)


class RunWriter(Worker):
    def __init__(
        self, database: Database, closing: threading.Event, log: FilteringBoundLogger
    ) -> None:
        super().__init__("outcomes", log)
        self._database = database
        self._closing = closing
        self._starts: GroupCommit[StartRequest, Started] = GroupCommit(
            self._write_starts, isolate=refused_data
        )
        self._queued: GroupCommit[QueueRequest, Started] = GroupCommit(
            partial(handoff.queue, database), isolate=refused_data
        )
        self._outcomes: queue.SimpleQueue[tuple[Finish, Then] | Claim | None] = queue.SimpleQueue()
        self.start()

    def start_one(self, claim: Claim, *, in_turn: bool) -> Started:
        """Mark the run running if it is ours (and, `in_turn`, its turn)."""
        return self._starts.submit(StartRequest(claim, in_turn))

    def start_many(self, requests: Sequence[StartRequest]) -> list[Started]:
        """Mark many runs running in one statement, each on its own fence."""
        return self._write_starts(requests)

    def queue_one(self, request: QueueRequest) -> Started:
        """Mark a run queued for a task queue's worker (group commit, like `start_one`)."""
        return self._queued.submit(request)

    def queue_many(self, requests: Sequence[QueueRequest]) -> list[Started]:
        """Mark many runs queued in one statement, each on its own fence."""
        return handoff.queue(self._database, requests)

    def finish_now(self, outcome: Finish) -> bool:
        """Record an outcome and wait for it; False when the fence refused it."""
        (applied,), _ = writes.record(self._database, [outcome], [])
        return applied

    def began(self, claim: Claim) -> None:
        """Queue the word that this run's function has been called."""
        self._outcomes.put(claim)

    def finish_later(self, outcome: Finish, then: Then) -> None:
        """Queue an outcome; `then` runs on the writer thread once it is settled."""
        self._outcomes.put((outcome, then))

    def close(self) -> None:
        """Stop the writer thread once what is queued is settled."""
        self._outcomes.put(None)

    def _write_starts(self, requests: Sequence[StartRequest]) -> list[Started]:
        _, started = writes.record(self._database, [], requests)
        return started

    def serve_one(self) -> bool:
        first = self._outcomes.get()
        if first is None:
            return False
        taken = [first]
        # Sleep through the linger, then take what came: waiting on the queue instead
        # would wake this thread once for every outcome of a burst. A node that starts
        # closing cuts the linger short.
        self._closing.wait(OUTCOME_LINGER_S)
        while len(taken) < MAX_BATCH:
            try:
                more = self._outcomes.get_nowait()
            except queue.Empty:
                break
            if more is None:
                self._outcomes.put(None)  # stop after this batch
                break
            taken.append(more)
        batch = [item for item in taken if not isinstance(item, Claim)]
        # A body whose outcome is here needs no word of its own, unless it outlives it.
        ended = {outcome.claim.key for outcome, _ in batch if not outcome.lingering}
        began = [item for item in taken if isinstance(item, Claim) and item.key not in ended]
        try:
            self._settle(batch, began)
        except Exception:
            self._tell([(then, Settled.LOST) for _, then in batch])
            raise
        return True

    def _settle(self, batch: list[tuple[Finish, Then]], began: Sequence[Claim] = ()) -> None:
        """Write a batch until it lands; split it when one row may be at fault."""
        backoff = Backoff(self._closing)
        while True:
            try:
                applied, _ = writes.record(
                    self._database, [outcome for outcome, _ in batch], [], began=began
                )
            except StoreError as error:
                if refused_data(error) and (len(batch) > 1 or began):
                    if began:  # a word on a body is worth no outcome: left unsaid
                        self._log.warning("run_began_unsaid", runs=len(began), error=error.message)
                    for one in batch:
                        self._settle([one])
                    return
                if refused_data(error) or backoff.exhausted:
                    for outcome, _ in batch:
                        self._log.error(
                            "run_outcome_lost",
                            job=outcome.claim.job,
                            period=outcome.claim.period.isoformat(),
                            run_id=outcome.claim.id,
                            attempt=outcome.claim.attempt,
                            error=error.message,
                        )
                    self._tell([(then, Settled.LOST) for _, then in batch])
                    return
                self._log.warning(
                    "database_unavailable",
                    error=error.message,
                    retry_in=backoff.delay,
                    outcomes=len(batch),
                )
                backoff.sleep()
                continue
            told = [
                (then, Settled.WRITTEN if written else Settled.REFUSED)
                for (_, then), written in zip(batch, applied, strict=True)
            ]
            self._tell(told)
            return

    def _tell(self, told: Sequence[tuple[Then, Settled]]) -> None:
        """Tell each outcome's owner how its write settled. The lines they log go out in
        one write, and only then does any of their runs end: ending a run may start its
        job's next period or wake whoever waits for it, and its line comes first."""
        ends: list[Callable[[], None]] = []
        with logs.together():
            for then, settled in told:
                try:
                    ends.append(then(settled))
                except Exception:  # noqa: BLE001 - this thread must outlive a bug in one
                    self._log.exception("dispatch_crashed")
        for end in ends:
            try:
                end()
            except Exception:  # noqa: BLE001 - as above
                self._log.exception("dispatch_crashed")
