"""What an outcome becomes: the row written (with its retry, if one is due) and the
lines logged once the writer has settled it."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import timedelta

from structlog.typing import FilteringBoundLogger

from scheduler import metrics
from scheduler.model import Claim, Finish
from scheduler.policy import Policy
from scheduler.run.failures import Outcome
from scheduler.run.writer import Settled
from scheduler.states import Reason, RunStatus

MAX_RETRY_DELAY = timedelta(hours=6)
# A retry waits up to this share of its backoff more, so that retries spread.
RETRY_JITTER = 0.25


def spread() -> float:
    """The share of its backoff a retry waits more: at random, up to `RETRY_JITTER`."""
    return random.uniform(0, RETRY_JITTER)


def retry_delay(policy: Policy, attempt: int, jitter: Callable[[], float] = spread) -> float:
    """Exponential backoff from `retry_backoff`, plus `jitter()` of it (up to 25 %, at
    random: `scheduler.testing` gives its own, to be deterministic)."""
    base = policy.retry_backoff.total_seconds() * 2 ** (attempt - 1)
    delay: float = min(base * (1 + jitter()), MAX_RETRY_DELAY.total_seconds())
    return delay


def finish(
    claim: Claim,
    policy: Policy,
    outcome: Outcome,
    duration_ms: int,
    *,
    jitter: Callable[[], float] = spread,
) -> Finish:
    """The row for an attempt whose function returned: with a retry while attempts remain
    (`jitter`: the share of its backoff the retry waits more)."""
    retry_in = None
    started = claim.starts_before + 1  # this attempt counts: it called the function
    if outcome.status is not RunStatus.SUCCEEDED and started < policy.max_attempts:
        retry_in = retry_delay(policy, started, jitter)
    return Finish(
        claim,
        outcome.status,
        duration_ms,
        outcome.failure,
        retry_in=retry_in,
        lingering=outcome.lingering is not None,
        alert_after=policy.alert_after_failures,
        pause_after=policy.pause_after_failures,
    )


def abandon(
    claim: Claim, retry_in: float, *, waiting_only: bool = False, reason: Reason = Reason.SHUTDOWN
) -> Finish:
    """The row for a run given back (at shutdown, or unstarted once its lease was given up)."""
    return Finish(
        claim,
        RunStatus.ABANDONED,
        None,
        reason=reason,
        retry_in=retry_in,
        waiting_only=waiting_only,
    )


def report(log: FilteringBoundLogger, written: Finish, outcome: Outcome, settled: Settled) -> None:
    """Say how the run ended, once its outcome is settled. A lost write was logged by the
    writer (`run_outcome_lost`); a refused one means the run is no longer this attempt's."""
    job, duration_ms = written.claim.job, written.duration_ms or 0
    if settled is Settled.LOST:
        return
    if settled is Settled.REFUSED:
        log.warning("run_outcome_refused", stage="finish", status=outcome.status.value)
        return
    metrics.record_finish(job, outcome.status, duration_ms)
    if outcome.status is RunStatus.ABANDONED:  # given up while it ran: runs again
        reason = written.reason.value if written.reason else None
        log.warning("run_abandoned", reason=reason, duration_ms=duration_ms, retry_in_s=0.0)
        return
    if outcome.status is RunStatus.SUCCEEDED:
        log.info("run_succeeded", duration_ms=duration_ms)
        return
    # A failure with a retry to come is a warning (the retry says how it went); the last
    # one is the error. Either way with the traceback (`exception`).
    assert outcome.failure is not None
    event = "run_timed_out" if outcome.status is RunStatus.TIMED_OUT else "run_failed"
    fields: dict[str, object] = {
        "duration_ms": duration_ms,
        "error_type": outcome.failure.type,
        "error": outcome.failure.message,
        "failure": outcome.failure,
    }
    if written.retry_in is None:
        metrics.record_final_failure(job)
        log.error(event, **fields)
    else:
        log.warning(event, retry_in_s=round(written.retry_in, 3), **fields)
