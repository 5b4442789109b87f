"""The example's job: every 2 seconds an invoice, written with the ORM in the same
transaction as its `ctx.once` record, so that a retry or a takeover never writes it twice.

Every third period fails once after its invoice committed (as a network error after the
write would): its retry finds the key recorded and writes nothing more.
"""

from __future__ import annotations

from django.db import connection, transaction

from billing.models import Invoice
from scheduler import RunContext, job


@job(cron="*/2 * * * * *", retries=2, retry_backoff="1s", overlap="allow", name="invoice")
def invoice(ctx: RunContext) -> None:
    with transaction.atomic():
        if ctx.once(f"invoice:{ctx.period.isoformat()}", connection=connection):
            Invoice.objects.create(
                period=ctx.period, run_id=ctx.run_id, attempt=ctx.attempt, node=ctx.node
            )
    if ctx.attempt == 1 and ctx.period.second % 6 == 0:
        raise ConnectionError("the invoice was written, then the connection dropped")


@job(cron=None, name="tenant-report")
def tenant_report(ctx: RunContext, tenant: str) -> None:
    """A template: each tenant's schedule (`scheduler.schedules`, or the admin) runs it."""
    ctx.log.info("report_written", tenant=tenant, invoices=Invoice.objects.count())
