"""The lines a node logs for one committed claim, whichever loop made it (the daemon's
own due periods, or a pass over the schedules created at run time)."""

from __future__ import annotations

from structlog.typing import FilteringBoundLogger

from scheduler import logs
from scheduler.model import ClaimResult


def log_claims(log: FilteringBoundLogger, result: ClaimResult) -> None:
    """`run_claimed` for each period won, `run_skipped` for each recorded skipped, in
    one write."""
    with logs.together():
        for claim in result.won:
            log.info(
                "run_claimed",
                job=claim.job,
                period=claim.period.isoformat(),
                run_id=claim.id,
                attempt=claim.attempt,
                origin=claim.origin.value,
            )
        for claim in result.skipped:
            log.info(
                "run_skipped",
                job=claim.job,
                period=claim.period.isoformat(),
                run_id=claim.id,
                reason=result.reasons[claim.id].value,
            )
