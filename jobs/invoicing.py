"""Monthly invoicing that is safe to run twice: items for each invoice and email,
checkpoints for a long customer list.

- The invoice row and its item record commit in one transaction (`ctx.once(key,
  connection=...)`): a retry, a takeover after a crash or a re-run never bills a
  customer twice for a month.
- The email is an effect outside the database: `ctx.item` sends it at most once. If
  the process dies mid-send, the key stays claimed and `scheduler items invoicing
  --stuck` lists it for someone to check.
- A checkpoint after every batch lets a later attempt start after the last finished
  batch instead of asking the items table about every customer again.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, insert, select

from jobs.app import customers, engine, invoices
from scheduler import RunContext, job

BATCH = 100
DEMO_CUSTOMERS = 250


@job(cron="0 6 1 * *", name="invoicing", retries=3, retry_backoff="5m", timeout="2h")
def invoicing(ctx: RunContext) -> None:
    """On the 1st at 06:00 UTC, bill every customer for the month that just ended."""
    month = (ctx.period - timedelta(days=1)).strftime("%Y-%m")
    after = (ctx.last_checkpoint or {}).get("after", 0)
    ctx.log.info("invoicing_started", month=month, after_customer=after)
    while batch := _customers_after(after):
        for customer in batch:
            if ctx.cancelled.is_set():
                raise RuntimeError("stopped early; the next attempt resumes at the checkpoint")
            _bill(ctx, month, customer)
        after = batch[-1].id
        ctx.checkpoint({"after": after})
    ctx.log.info("invoicing_finished", month=month, last_customer=after)


def _bill(ctx: RunContext, month: str, customer: Any) -> None:
    with engine().begin() as connection:
        # Recorded in this transaction: it commits with the invoice, or neither does.
        if ctx.once(f"invoice:{month}:{customer.id}", connection=connection):
            connection.execute(
                insert(invoices).values(
                    customer_id=customer.id, month=month, amount_cents=customer.monthly_cents
                )
            )
    with ctx.item(f"email:{month}:{customer.id}") as fresh:
        if fresh:
            send_invoice_email(ctx, customer.email, month)


def send_invoice_email(ctx: RunContext, address: str, month: str) -> None:
    """Replace with your mailer. Raise if it fails: the key is released for the retry."""
    ctx.log.debug("invoice_emailed", to=address, month=month)


def _customers_after(after: int) -> list[Any]:
    with engine().begin() as connection:
        _add_demo_customers(connection)
        return list(
            connection.execute(
                select(customers)
                .where(customers.c.id > after)
                .order_by(customers.c.id)
                .limit(BATCH)
            )
        )


def _add_demo_customers(connection: Connection) -> None:
    """So that the example has someone to bill; your customers are already there."""
    if connection.execute(select(customers.c.id).limit(1)).first() is None:
        connection.execute(
            insert(customers),
            [
                {"id": n, "email": f"customer{n}@example.com", "monthly_cents": 1000 + n}
                for n in range(1, DEMO_CUSTOMERS + 1)
            ],
        )
