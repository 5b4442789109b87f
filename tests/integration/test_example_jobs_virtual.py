"""The example jobs (`jobs/`, what `scheduler run` runs with no arguments), tested as a
user would test theirs: with the pytest plugin of `scheduler.testing` and its virtual
clock. Their application tables live in the harness's own database, as in the examples."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, func, insert, select

import jobs.invoicing
from jobs.app import engine, invoices, sessions
from jobs.cleanup import cleanup
from jobs.digest import digest
from jobs.heartbeat import heartbeat
from jobs.invoicing import DEMO_CUSTOMERS, invoicing
from scheduler.run.context import RunContext
from scheduler.testing import Harness, crash_here


@pytest.fixture
def app(scheduler_harness: Harness, monkeypatch: pytest.MonkeyPatch) -> Iterator[Engine]:
    """The examples' application engine, on the harness's database."""
    monkeypatch.setenv("SCHEDULER_DATABASE_URL", scheduler_harness.database_url)
    engine.cache_clear()
    yield engine()
    engine().dispose()
    engine.cache_clear()


@pytest.mark.scheduler(jobs=[heartbeat], start="2026-01-01T00:00:30Z")
def test_heartbeat_runs_every_minute(scheduler_harness: Harness) -> None:
    scheduler_harness.clock.advance("10m")
    minutes = [f"2026-01-01T00:{minute:02}:00Z" for minute in range(1, 11)]
    scheduler_harness.assert_periods("heartbeat", minutes)
    assert len(scheduler_harness.log_lines("heartbeat", job="heartbeat")) == 10


@pytest.mark.scheduler(jobs=[digest], start="2026-01-01T00:00:30Z")
def test_digest_is_a_coroutine_run_every_five_minutes(scheduler_harness: Harness) -> None:
    scheduler_harness.clock.advance("15m")
    scheduler_harness.assert_periods(
        "digest", ["2026-01-01T00:05Z", "2026-01-01T00:10Z", "2026-01-01T00:15Z"]
    )
    assert [line["period"] for line in scheduler_harness.log_lines("digest_built")] == [
        "2026-01-01T00:05:00+00:00",
        "2026-01-01T00:10:00+00:00",
        "2026-01-01T00:15:00+00:00",
    ]


@pytest.mark.scheduler(jobs=[cleanup], start="2026-01-01T12:00Z")
def test_cleanup_deletes_the_sessions_expired_by_its_period(
    scheduler_harness: Harness, app: Engine
) -> None:
    night = datetime(2026, 1, 2, 2, 30, tzinfo=UTC)
    with app.begin() as connection:
        connection.execute(
            insert(sessions),
            [{"id": f"old{n}", "expires_at": night - timedelta(minutes=n + 1)} for n in range(1200)]
            + [{"id": "fresh", "expires_at": night + timedelta(minutes=1)}],
        )
    scheduler_harness.clock.advance("1d")
    scheduler_harness.assert_periods("cleanup", ["2026-01-02T02:30Z"])
    [said] = scheduler_harness.log_lines("sessions_deleted")
    assert said["count"] == 1200
    with app.begin() as connection:
        assert list(connection.execute(select(sessions.c.id)).scalars()) == ["fresh"]


@pytest.mark.scheduler(jobs=[invoicing], start="2026-01-31T12:00Z")
def test_invoicing_bills_each_customer_once_across_a_crash(
    scheduler_harness: Harness, app: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node dies while emailing customer 150 (after the first batch's checkpoint):
    the retake resumes after customer 100, bills nobody twice and emails nobody twice;
    customer 150's email is left stuck for a person to check."""
    emailed: list[str] = []

    def send(ctx: RunContext, address: str, month: str) -> None:
        emailed.append(address)
        if ctx.attempt == 1 and address == "customer150@example.com":
            crash_here()

    monkeypatch.setattr(jobs.invoicing, "send_invoice_email", send)
    scheduler_harness.clock.to("2026-02-01T07:00Z")

    run = scheduler_harness.run("invoicing", "2026-02-01T06:00Z")
    assert (run.status, run.attempt) == ("succeeded", 2)
    started = scheduler_harness.log_lines("invoicing_started")
    assert [line["after_customer"] for line in started] == [0, 100]
    assert len(emailed) == len(set(emailed)) == DEMO_CUSTOMERS
    with app.begin() as connection:
        count = connection.execute(
            select(func.count()).select_from(invoices).where(invoices.c.month == "2026-01")
        ).scalar()
    assert count == DEMO_CUSTOMERS
    stuck = [item.key for item in scheduler_harness.items("invoicing") if item.stuck]
    assert stuck == ["email:2026-01:150"]
