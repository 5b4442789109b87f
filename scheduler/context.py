"""`RunContext`: what a job knows about the run it is doing."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime

import structlog

from scheduler.states import Origin


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
    log: structlog.stdlib.BoundLogger
    cancelled: threading.Event = field(default_factory=threading.Event)

    @property
    def fencing_token(self) -> int:
        """The attempt number: any external write may be fenced on it."""
        return self.attempt
