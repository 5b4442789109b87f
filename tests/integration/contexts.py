"""A job's `RunContext` for a claim a test made itself, as a node's worker builds it."""

from __future__ import annotations

import structlog

from scheduler.model import Claim
from scheduler.run.context import RunContext
from scheduler.run.items import RunItems
from scheduler.store.database import Database


def context_for(database: Database, claim: Claim) -> RunContext:
    """The context a run of `claim` gets: its items and checkpoints on `database`."""
    return RunContext(
        job=claim.job,
        period=claim.period,
        run_id=claim.id,
        attempt=claim.attempt,
        node=claim.holder,
        origin=claim.origin,
        log=structlog.get_logger("test"),
        run_items=RunItems(database, claim),
    )
