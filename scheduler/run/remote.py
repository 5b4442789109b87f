"""The node's side of a remote executor: a held run handed to a task queue.

The dispatcher stays the authority: it marks the run `queued` (fenced, in a batch like
starts) and only then sends the message, so that a worker can never find the message
before the row it must start. The queued lease is the message's deadline, renewed by
nobody: when no worker starts the run in time, the recovery loop of any node retakes
it as the next attempt and sends it again, and the first message is stale from then on.
A message that could not be sent at all is sent again sooner, RESEND_S later.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace

from structlog.typing import FilteringBoundLogger

from scheduler.alerting.propagation import inject_context
from scheduler.model import Claim, QueueRequest
from scheduler.remote import Remote, RemoteError, TaskMessage
from scheduler.store import handoff
from scheduler.store.database import Database
from scheduler.store.faults import StoreError

# A message the broker did not take: its period is retaken and sent again this long
# after (or at its deadline, if that is sooner).
RESEND_S = 2.0


def queue_request(claim: Claim, remote: Remote, *, in_turn: bool) -> QueueRequest:
    return QueueRequest(claim, remote.queue, remote.deadline_s, in_turn)


def message_of(claim: Claim, remote: Remote) -> TaskMessage:
    return TaskMessage(
        job=claim.job,
        period=claim.period,
        run_id=claim.id,
        attempt=claim.attempt,
        holder=claim.holder,
        origin=claim.origin,
        deadline_s=remote.deadline_s,
    )


def send(
    database: Database,
    claim: Claim,
    remote: Remote,
    log: FilteringBoundLogger,
    around: contextlib.AbstractContextManager[None] | None = None,
) -> bool:
    """Send the message of a run already marked queued; False when it was not sent (the
    run is then retaken and sent again shortly, as the next attempt). `around`: the
    observers' part in the send (a trace span, whose context the message carries)."""
    try:
        with around or contextlib.nullcontext():
            remote.send(replace(message_of(claim, remote), trace=inject_context({})))
    except RemoteError as error:
        resend_in = min(RESEND_S, remote.deadline_s)
        log.error("run_send_failed", executor=remote.kind, error=str(error), resend_in_s=resend_in)
        try:
            handoff.unsend(database, claim, resend_in)
        except StoreError as fault:  # the deadline still ends the queued lease
            log.warning("database_unavailable", error=fault.message)
        return False
    log.info("run_queued", executor=remote.kind, queue=remote.queue, deadline_s=remote.deadline_s)
    return True
