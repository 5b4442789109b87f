"""A yearly billing job over CUSTOMERS customers (default 1,000): each invoice is a row in
the job's own table, written in one transaction with its item record (exactly once);
each email is a line in EMAILS_FILE, guarded by `ctx.item` (at most once).

On attempt 1 it hangs while "sending" the email of customer HANG_AT, so a test can kill
it there; the attempt FAIL_ON_ATTEMPT fails after the last customer, forcing the whole
period to run again.
"""

from __future__ import annotations

import os
import time
from functools import cache
from pathlib import Path

from sqlalchemy import Column, Engine, Integer, MetaData, String, Table, create_engine, insert

from scheduler import RunContext, job
from tests.acceptance.jobmods.evidence import note

metadata = MetaData()
invoices = Table(
    "test_invoices",
    metadata,
    # No unique key on customer: only the item ledger may keep an invoice from doubling.
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("customer", String(20), nullable=False),
    Column("attempt", Integer, nullable=False),
)


@cache
def engine() -> Engine:
    created = create_engine(os.environ["APP_DATABASE_URL"])
    metadata.create_all(created)
    return created


def send_email(ctx: RunContext, customer: str) -> None:
    if ctx.attempt == 1 and customer == os.environ.get("HANG_AT"):
        note(ctx, f"sending {customer}")
        time.sleep(60)
    with Path(os.environ["EMAILS_FILE"]).open("a") as emails:
        emails.write(f"{customer} {ctx.attempt}\n")


@job(cron="0 0 1 1 *", name="bill-customers", lease="3s", retries=2, retry_backoff="0.2s")
def bill_customers(ctx: RunContext) -> None:
    note(ctx, "start")
    for number in range(int(os.environ.get("CUSTOMERS", "1000"))):
        customer = f"{number:04d}"
        with engine().begin() as connection:
            if ctx.once(f"invoice:{customer}", connection=connection):
                connection.execute(insert(invoices).values(customer=customer, attempt=ctx.attempt))
                with ctx.item(f"email:{customer}") as fresh:
                    if fresh:
                        send_email(ctx, customer)
    note(ctx, "end")
    if str(ctx.attempt) == os.environ.get("FAIL_ON_ATTEMPT"):
        raise RuntimeError("forced failure: the period runs again")


@job(cron="0 0 * * *", name="mail-customers")
def mail_customers(ctx: RunContext) -> None:
    """1,000 emails, each at most once, for two `run-once` copies started together."""
    note(ctx, "start")
    with Path(os.environ["EMAILS_FILE"]).open("a") as emails:
        for number in range(int(os.environ.get("CUSTOMERS", "1000"))):
            with ctx.item(f"email:{number:04d}") as fresh:
                if fresh:
                    emails.write(f"{number:04d} {ctx.node}\n")
                    emails.flush()
    note(ctx, "end")
