"""A job's `RunContext` for a claim a test made itself, as a node's worker builds it."""

from __future__ import annotations

import structlog

from scheduler.model import Claim
from scheduler.run.context import RunContext
from scheduler.run.items import run_context
from scheduler.store.database import Database


def context_for(database: Database, claim: Claim) -> RunContext:
    """The context a run of `claim` gets: its items and checkpoints on `database`."""
    return run_context(
        claim, node=claim.holder, database=database, log=structlog.get_logger("test")
    )
