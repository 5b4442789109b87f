"""The example jobs in jobs/ do what the docs say (docs/tutorial/first-job.md), on real
databases."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, insert, select

from jobs import app, cleanup, invoicing
from scheduler import model
from scheduler.model import Claim, Due
from scheduler.run.context import RunContext
from scheduler.states import Origin, RunStatus
from scheduler.store import claims, items, queries, takeover, writes
from scheduler.store.database import Database
from tests.integration.contexts import context_for

NOVEMBER = datetime(2026, 11, 1, 6, 0, tzinfo=UTC)


@pytest.fixture
def app_database(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The example application's engine on the test's database."""
    monkeypatch.setenv("SCHEDULER_DATABASE_URL", database_url)
    app.engine.cache_clear()
    yield
    app.engine().dispose()
    app.engine.cache_clear()


def _first_attempt(database: Database, job: str, period: datetime) -> Claim:
    (claim,) = claims.claim(database, [Due(job, period, 30)], "node-a").won
    assert writes.start(database, claim) is model.Started.STARTED
    return claim


def _next_attempt(database: Database, claim: Claim) -> Claim:
    assert writes.finish(database, claim, RunStatus.FAILED, 1, retry_in=0)
    (stale,) = takeover.find_stale(database, [claim.job], 10)
    taken = takeover.retake(database, stale, "node-b", Origin.SCHEDULE)
    assert taken is not None
    assert writes.start(database, taken) is model.Started.STARTED
    return taken


@pytest.mark.usefixtures("app_database")
def test_invoicing_bills_and_mails_each_customer_once_across_a_failed_attempt(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[tuple[str, int]] = []

    def mailer(ctx: RunContext, address: str, month: str) -> None:
        assert month == "2026-10"
        if address == "customer150@example.com" and ctx.attempt == 1:
            raise ConnectionError("smtp went away")
        sent.append((address, ctx.attempt))

    monkeypatch.setattr(invoicing, "send_invoice_email", mailer)
    claim = _first_attempt(database, "invoicing", NOVEMBER)
    with pytest.raises(ConnectionError):
        invoicing.invoicing(context_for(database, claim))
    row = queries.run_mapping(database, "invoicing", NOVEMBER)
    assert row is not None
    assert row["checkpoint"] == '{"after": 100}'

    invoicing.invoicing(context_for(database, _next_attempt(database, claim)))
    row = queries.run_mapping(database, "invoicing", NOVEMBER)
    assert row is not None
    assert row["checkpoint"] == '{"after": 250}'

    with app.engine().connect() as connection:
        billed = Counter(connection.execute(select(app.invoices.c.customer_id)).scalars())
        months = set(connection.execute(select(app.invoices.c.month)).scalars())
    assert sorted(billed) == list(range(1, 251))
    assert set(billed.values()) == {1}
    assert months == {"2026-10"}
    mailed = Counter(address for address, _ in sent)
    assert len(mailed) == 250
    assert set(mailed.values()) == {1}
    assert Counter(attempt for _, attempt in sent) == {1: 149, 2: 101}
    assert items.list_items(database, "invoicing", stuck_only=True) == []


@pytest.mark.usefixtures("app_database")
def test_cleanup_deletes_the_sessions_expired_by_its_period(database: Database) -> None:
    night = datetime(2026, 11, 30, 2, 30, tzinfo=UTC)
    engine = app.engine()
    with engine.begin() as connection:
        connection.execute(
            insert(app.sessions),
            [
                {"id": f"s{n}", "expires_at": night + timedelta(minutes=n - 1200)}
                for n in range(1300)
            ],
        )
    cleanup.cleanup(context_for(database, _first_attempt(database, "cleanup", night)))
    with engine.connect() as connection:
        left = connection.execute(select(func.min(app.sessions.c.expires_at))).scalar_one()
        count = connection.execute(select(func.count()).select_from(app.sessions)).scalar_one()
    assert count == 100
    assert (left if left.tzinfo else left.replace(tzinfo=UTC)) == night
