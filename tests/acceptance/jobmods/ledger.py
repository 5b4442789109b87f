"""An hourly job that fails while LEDGER_FAIL=1, for backfill and rerun tests."""

from __future__ import annotations

import os

from scheduler import RunContext, job
from tests.acceptance.jobmods.evidence import note


@job(cron="0 * * * *", name="hourly-ledger")
def hourly_ledger(ctx: RunContext) -> None:
    note(ctx, "run")
    if os.environ.get("LEDGER_FAIL") == "1":
        raise RuntimeError("ledger unavailable")
