"""The invoice job under the scheduler's virtual clock (`scheduler.testing`), with
Django's test runner: `python manage.py test billing`.

The harness runs the node on a SQLite file of its own, and the job's `ctx.once(key,
connection=connection)` must write its record in that same database, with the invoice.
So during the test Django's default database is the harness's file, with the project's
tables migrated into it (`django_on`); the test database the runner made is back
after. That database is a file (the settings' `TEST` `NAME`): Django never closes its
connection to one in memory, which would so never move. And a `TransactionTestCase`: a
`TestCase` holds the test in a transaction opened before it, and a connection in a
transaction cannot move.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from django.core.management import call_command
from django.db import connections
from django.test import TransactionTestCase

from billing import jobs
from billing.models import Invoice
from scheduler.testing import Harness


@contextmanager
def django_on(harness: Harness) -> Iterator[None]:
    """Django's default database is the harness's file until the block ends."""
    default = connections["default"]
    test_database = default.settings_dict["NAME"]
    connections.close_all()
    default.settings_dict["NAME"] = harness.database_url.removeprefix("sqlite:///")
    try:
        # The project's tables; the scheduler's are there already, at the head.
        call_command("migrate", verbosity=0, interactive=False)
        yield
    finally:
        connections.close_all()
        default.settings_dict["NAME"] = test_database


class InvoiceJobTests(TransactionTestCase):
    def test_each_period_is_invoiced_once_even_when_it_is_retried(self) -> None:
        with Harness([jobs.invoice], start="2026-01-01T00:00:01Z") as harness, django_on(harness):
            harness.clock.to("2026-01-01T00:00:14Z")
            runs = harness.runs("invoice")
            # Every 2 s from 00:00:02; those at a multiple of 6 s failed once after
            # writing their invoice, and their retry wrote nothing more.
            assert [run.period.second for run in runs] == [2, 4, 6, 8, 10, 12, 14]
            assert {run.status for run in runs} == {"succeeded"}
            retried = {run.period.second: run.attempt for run in runs if run.attempt > 1}
            assert retried == {6: 2, 12: 2}
            invoices = Counter(invoice.period for invoice in Invoice.objects.all())
            assert sorted(invoices) == [run.period for run in runs]
            assert set(invoices.values()) == {1}
            assert {invoice.attempt for invoice in Invoice.objects.all()} == {1}
            assert {item.state for item in harness.items("invoice")} == {"done"}
