"""Jobs for the docs' screenshot of the console (scripts/console-screenshot): a small
fleet whose grid shows every colour within a minute of running, and a pool."""

from __future__ import annotations

import time

from scheduler import Pool, RunContext, job


@job(cron="* * * * * *", name="inventory.sync")
def inventory_sync() -> None:
    time.sleep(0.05)


@job(cron="*/2 * * * * *", name="billing.charge-cards")
def charge_cards(ctx: RunContext) -> None:
    if ctx.period.second % 10 == 0:
        raise RuntimeError("card processor answered 503")


@job(cron="* * * * * *", name="reports.hourly-rollup")
def rollup() -> None:
    time.sleep(2.5)  # longer than its period: the next ones are skipped (overlap)


@job(cron="*/3 * * * * *", name="search.reindex", timeout="1s")
def reindex(ctx: RunContext) -> None:
    if ctx.period.second % 9 == 0:
        ctx.cancelled.wait(3)  # outlives its timeout: timed_out


@job(cron="* * * * * *", name="mail.digest")
def digest() -> None:
    time.sleep(0.2)


@job(cron="*/5 * * * * *", name="cleanup.sessions")
def cleanup() -> None:
    """Paused by the screenshot script: its periods are skipped (reason paused)."""


# Three exports due together share a pool of two: the third waits its turn (about as
# long as a body), so the overview's pools table shows runs running and waiting.
EXPORTS = Pool("exports", limit=2)


def _export() -> None:
    time.sleep(1.2)


for _name in ("exports.invoices", "exports.ledger", "exports.payroll"):
    globals()[_name.replace(".", "_")] = job(
        cron="*/2 * * * * *", name=_name, pool=EXPORTS, overlap="allow"
    )(_export)
