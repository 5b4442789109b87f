"""The start and finish writes of the runs a node holds, sent together.

Starts: the Starter sends a batch with `start_many`; a run that starts itself (the slow
path) waits for its own answer, but such starts at the same moment travel together
(group commit). Outcomes: the worker thread hands the outcome over and moves on to the
next run; one writer thread sends the outcomes that arrive within OUTCOME_LINGER_S of
each other in one statement, retries through database faults, and calls back when each
is written or refused. A burst of 10,000 short runs so costs a few hundred statements,
not 20,000 transactions, and no worker waits on a commit after its job has returned.

The writer thread outlives any fault: a lost connection or a pool that ran dry is
retried, a row the database refuses is written alone (and given up alone), and a bug
in one callback is logged. Once the node is closing it no longer lingers.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError, SQLAlchemyError
from structlog.typing import FilteringBoundLogger

from scheduler.groupcommit import MAX_BATCH, GroupCommit
from scheduler.store import runs
from scheduler.store.database import Database, describe_fault
from scheduler.store.runs import Claim, Finish, Start, StartRequest

RETRY_FIRST_DELAY_S = 0.2
# The outcome writer waits this long after the first outcome for others to join it: when
# many runs end together, fewer and larger statements leave more of the machine to the
# starts of the runs still queued (c: start lag p99 429 -> 343 ms). A run ends (its
# successor may start) that much later, far below any period.
OUTCOME_LINGER_S = 0.05
RETRY_MAX_DELAY_S = 5.0

# Called once per outcome: True written, False refused by the fence, None given up
# (the node is closing and the database stays away, or the row cannot be stored).
Written = Callable[[bool | None], None]


class Backoff:
    """The pause between tries of a write through database faults, doubling up to a
    ceiling. Once the node is closing and the ceiling is reached the write is given up:
    the lease then expires and another node takes the period."""

    def __init__(self, closing: threading.Event) -> None:
        self.delay = RETRY_FIRST_DELAY_S
        self._closing = closing

    @property
    def exhausted(self) -> bool:
        return self._closing.is_set() and self.delay >= RETRY_MAX_DELAY_S

    def sleep(self) -> None:
        # An event's wait, not time.sleep: the same pause, and no clock_nanosleep.
        threading.Event().wait(self.delay)
        self.delay = min(self.delay * 2, RETRY_MAX_DELAY_S)


# What a write may raise beyond a store fault: a value the driver cannot send as it is.
UNSENDABLE = (UnicodeError, ValueError, TypeError)


def bad_data(error: Exception) -> bool:
    """A failure that one request's data may have caused, not the connection: the
    database refused it, or it could not be sent as it is (a value no driver encodes)."""
    if isinstance(error, DBAPIError):
        return not isinstance(error, OperationalError | InterfaceError)
    return isinstance(error, UNSENDABLE) or isinstance(error.__cause__, UNSENDABLE)


class RunWriter:
    def __init__(
        self, database: Database, closing: threading.Event, log: FilteringBoundLogger
    ) -> None:
        self._database = database
        self._closing = closing
        self._log = log
        self._starts: GroupCommit[StartRequest, Start] = GroupCommit(
            self._write_starts, isolate=bad_data
        )
        self._outcomes: queue.SimpleQueue[tuple[Finish, Written] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._write_outcomes, name="outcomes", daemon=True)
        self._thread.start()

    def start(self, claim: Claim, *, after_earlier: bool) -> Start:
        """Mark the run running if it is ours (and, `after_earlier`, its turn)."""
        return self._starts.submit(StartRequest(claim, after_earlier))

    def start_many(self, requests: Sequence[StartRequest]) -> list[Start]:
        """Mark many runs running in one statement, each on its own fence."""
        return self._write_starts(requests)

    def finish_now(self, outcome: Finish) -> bool:
        """Record an outcome and wait for it; False when the fence refused it."""
        (applied,), _ = runs.record(self._database, [outcome], [])
        return applied

    def finish_later(self, outcome: Finish, then: Written) -> None:
        """Queue an outcome; `then` runs on the writer thread once it is settled."""
        self._outcomes.put((outcome, then))

    def close(self) -> None:
        """Stop the writer thread once what is queued is settled."""
        self._outcomes.put(None)

    def _write_starts(self, requests: Sequence[StartRequest]) -> list[Start]:
        _, started = runs.record(self._database, [], requests)
        return started

    def _write_outcomes(self) -> None:
        while True:
            first = self._outcomes.get()
            if first is None:
                return
            batch = [first]
            linger = 0.0 if self._closing.is_set() else OUTCOME_LINGER_S
            deadline = time.monotonic() + linger
            while len(batch) < MAX_BATCH:
                wait = deadline - time.monotonic()
                try:
                    more = (
                        self._outcomes.get(timeout=wait)
                        if wait > 0
                        else self._outcomes.get_nowait()
                    )
                except queue.Empty:
                    break
                if more is None:
                    self._outcomes.put(None)  # stop after this batch
                    break
                batch.append(more)
            try:
                self._settle(batch)
            except Exception:  # noqa: BLE001 - this thread must outlive a bug in one batch
                self._log.exception("dispatch_crashed")
                for _, then in batch:
                    self._call(then, None)

    def _settle(self, batch: list[tuple[Finish, Written]]) -> None:
        """Write a batch until it lands; split it when one row may be at fault."""
        backoff = Backoff(self._closing)
        while True:
            try:
                applied, _ = runs.record(self._database, [outcome for outcome, _ in batch], [])
            except (SQLAlchemyError, *UNSENDABLE) as error:
                if bad_data(error) and len(batch) > 1:
                    for one in batch:
                        self._settle([one])
                    return
                if bad_data(error) or backoff.exhausted:
                    for outcome, then in batch:
                        self._log.error(
                            "run_outcome_lost",
                            job=outcome.claim.job,
                            period=outcome.claim.period.isoformat(),
                            run_id=outcome.claim.id,
                            attempt=outcome.claim.attempt,
                            error=describe_fault(error),
                        )
                        self._call(then, None)
                    return
                self._log.warning(
                    "database_unavailable",
                    error=describe_fault(error),
                    retry_in=backoff.delay,
                    outcomes=len(batch),
                )
                backoff.sleep()
                continue
            for (_, then), written in zip(batch, applied, strict=True):
                self._call(then, written)
            return

    def _call(self, then: Written, written: bool | None) -> None:
        try:
            then(written)
        except Exception:  # noqa: BLE001 - this thread must outlive a bug in one callback
            self._log.exception("dispatch_crashed")
