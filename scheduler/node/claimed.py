"""The lines a node logs for one committed claim, whichever loop made it (the daemon's
own due periods, the catch-up, or a pass over the schedules created at run time)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from structlog.typing import FilteringBoundLogger

from scheduler import logs
from scheduler.model import ClaimResult
from scheduler.policy import CatchupBudget


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


def log_deferred(
    log: FilteringBoundLogger,
    deferred: Sequence[datetime],
    budget: CatchupBudget | None,
    fleet_budget: CatchupBudget | None,
) -> None:
    """`periods_deferred`: the late periods a catch-up budget (the job's or the fleet's)
    left for an operator to decide, earliest first."""
    log.warning(
        "periods_deferred",
        count=len(deferred),
        first=deferred[0].isoformat(),
        last=deferred[-1].isoformat(),
        budget=str(budget or "-"),
        fleet_budget=str(fleet_budget or "-"),
    )
