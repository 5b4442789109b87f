"""A run's handle on the items and its checkpoint, fenced on the run's claim.

`RunContext.once`, `.item`, `.checkpoint` and `.last_checkpoint` call this; the SQL
lives in `store.items` and `store.checkpoints`. Once the node has given the run up (its
lease could not be renewed in time), they refuse at once, without asking the database:
the answer might not come before another node takes the run over.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from structlog.typing import FilteringBoundLogger

from scheduler.errors import RunLostError
from scheduler.model import Claim
from scheduler.run.context import Previous, RunContext
from scheduler.store import checkpoints
from scheduler.store import items as stored_items
from scheduler.store.database import Database
from scheduler.store.faults import StoreError
from scheduler.store.items import ItemState, Taken

MAX_KEY_LENGTH = 500
_UNREAD = object()


class RunItems:
    """Items and checkpoints for one attempt of one run."""

    def __init__(self, database: Database, claim: Claim) -> None:
        self._database = database
        self._claim = claim
        self._previous: Any = _UNREAD
        self._before: Previous | None = None
        self._before_read = False
        self._lock = threading.Lock()
        # Set once by the node, read by the job's thread; nobody waits on it, so a flag,
        # not an Event (a Condition built per run: a tenth of a node's time spent
        # dispatching a burst's claims).
        self._lost = False

    @property
    def database(self) -> Database:
        return self._database

    @property
    def claim(self) -> Claim:
        return self._claim

    def lose(self) -> None:
        """The node gave the run up: refuse everything from now on."""
        self._lost = True

    def _still_held(self) -> None:
        if self._lost:
            raise RunLostError(self._lost_message())

    def once(self, key: str, connection: object | None = None) -> bool:
        """Record `key`; True only for the first claimant, ever. Through `connection` the
        record commits or rolls back with the job's own transaction."""
        checked = self._check_key(key)
        self._still_held()
        if connection is None:
            taken = stored_items.claim(self._database, self._claim, checked, state=ItemState.DONE)
            return self._answer(taken)
        own = stored_items.job_connection(connection)
        taken = stored_items.claim(
            self._database, self._claim, checked, state=ItemState.DONE, connection=own
        )
        return self._answer(taken, elsewhere=True)

    @contextmanager
    def item(self, key: str, log: FilteringBoundLogger) -> Iterator[bool]:
        """Claim `key` for the block: done when it returns, released when it raises, left
        claimed (stuck) when the process dies or the block is cancelled."""
        checked = self._check_key(key)
        self._still_held()
        fresh = self._answer(
            stored_items.claim(self._database, self._claim, checked, state=ItemState.CLAIMED)
        )
        if not fresh:
            yield False
            return
        try:
            yield True
        except Exception:
            self._release(checked, log)
            raise
        stored_items.complete(self._database, self._claim, checked)

    def _release(self, key: str, log: FilteringBoundLogger) -> None:
        """Let a retry redo the item; if even that fails, it stays claimed and is listed stuck."""
        try:
            stored_items.release(self._database, self._claim, key)
        except StoreError as error:
            log.warning("item_release_failed", key=key, error=error.message)

    def checkpoint(self, state: Any) -> None:
        try:
            document = json.dumps(state, allow_nan=False, sort_keys=True)
        except (TypeError, ValueError) as error:
            raise TypeError(
                f"job {self._claim.job!r}: checkpoint: {error} "
                "(a checkpoint must be JSON: dict, list, str, int, float, bool or None)"
            ) from None
        self.last_checkpoint()  # what earlier attempts left stays readable
        self._still_held()
        if not checkpoints.save(self._database, self._claim, document):
            raise RunLostError(self._lost_message())

    def last_checkpoint(self) -> Any:
        """What the latest checkpoint held when this attempt first looked; None if none."""
        with self._lock:
            if self._previous is _UNREAD:
                document = checkpoints.load(self._database, self._claim.id)
                self._previous = None if document is None else json.loads(document)
            return self._previous

    def previous(self) -> Previous | None:
        """The newest earlier period of the job that reached an outcome (read once)."""
        with self._lock:
            if not self._before_read:
                ended = checkpoints.previous(self._database, self._claim.job, self._claim.period)
                self._before = None if ended is None else Previous.of(ended)
                self._before_read = True
            return self._before

    def _answer(self, taken: Taken, *, elsewhere: bool = False) -> bool:
        if taken is Taken.LOST:
            raise RunLostError(self._lost_message(elsewhere=elsewhere))
        return taken is Taken.FRESH

    def _check_key(self, key: object) -> str:
        if not isinstance(key, str) or not key or len(key) > MAX_KEY_LENGTH:
            raise ValueError(
                f"job {self._claim.job!r}: item key: must be a non-empty string of at most "
                f"{MAX_KEY_LENGTH} characters, got {key!r:.80}"
            )
        return key

    def _lost_message(self, *, elsewhere: bool = False) -> str:
        claim = self._claim
        message = (
            f"job {claim.job!r}: run {claim.id} (period {claim.period.isoformat()}) is no "
            f"longer held by attempt {claim.attempt} on {claim.holder}"
        )
        if elsewhere:
            message += ", or connection= does not reach the scheduler's database"
        return message


def run_context(
    claim: Claim,
    *,
    node: str,
    database: Database,
    log: FilteringBoundLogger,
    args: Mapping[str, Any] | None = None,
) -> RunContext:
    """The context a job gets for a claim held here (by a node, or a task queue's
    worker), with its fenced handle on items and its checkpoint."""
    return RunContext(
        job=claim.job,
        period=claim.period,
        run_id=claim.id,
        attempt=claim.attempt,
        node=node,
        origin=claim.origin,
        log=log,
        run_items=RunItems(database, claim),
        args=args if args is not None else {},
    )
