"""`ctx.once(key, connection=…)` with Django's connection, on both databases: inside
`transaction.atomic()` the record commits and rolls back with the ORM's writes; outside
it, it is refused. And each call on a worker thread begins and ends with Django's
`close_old_connections`, so that no connection outlives its run (CONN_MAX_AGE 0), and
with a persistent CONN_MAX_AGE the helper thread of a job with a timeout closes its
connection as it ends, while a worker thread keeps one.

Django is configured once in this process, with one alias per database of this
module's own (`default` on PostgreSQL, `lite` on SQLite), and no app installed: the
hook is registered by the test, not by the app's start-up, so no other test sees it."""

from __future__ import annotations

import gc
import shutil
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import django
import psycopg
import pytest
import structlog
from django.conf import settings
from django.db import connection, connections, transaction

from scheduler import call_hooks, model
from scheduler.django.connections import fresh_connections
from scheduler.model import Due
from scheduler.registry import job
from scheduler.run.calling import call
from scheduler.run.context import RunContext
from scheduler.run.executors import ThreadExecutor
from scheduler.schedules import Schedules
from scheduler.states import Origin, RunStatus
from scheduler.store import claims, writes
from scheduler.store.database import Database, open_database
from tests.databases import postgres_database
from tests.integration.contexts import context_for
from tests.sql import rows

pytestmark = pytest.mark.postgres
PERIOD = datetime(2026, 11, 1, tzinfo=UTC)
ALIASES = ("default", "lite")


@pytest.fixture(scope="module")
def scheduler_urls(
    postgres_template: str, sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """The module's two databases, migrated, as Django's aliases see them."""
    lite = tmp_path_factory.mktemp("django") / "scheduler.db"
    shutil.copyfile(sqlite_template, lite)
    with postgres_database(template=postgres_template) as url:
        if not settings.configured:
            name = url.rsplit("/", 1)[1]
            settings.configure(
                USE_TZ=True,
                INSTALLED_APPS=[],
                DATABASES={
                    "default": {
                        "ENGINE": "django.db.backends.postgresql",
                        "NAME": name,
                        "USER": "postgres",
                        "HOST": "127.0.0.1",
                        "PORT": "5432",
                    },
                    "lite": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(lite)},
                },
            )
            django.setup()
        for alias in ALIASES:
            with connections[alias].cursor() as cursor:
                cursor.execute(
                    "CREATE TABLE app_invoices (customer VARCHAR(50) PRIMARY KEY, n INTEGER)"
                )
        yield {"default": url, "lite": f"sqlite:///{lite}"}
        connections.close_all()


@pytest.fixture(params=ALIASES)
def alias(request: pytest.FixtureRequest, scheduler_urls: dict[str, str]) -> Iterator[str]:
    chosen: str = request.param
    yield chosen
    with transaction.atomic(using=chosen), connections[chosen].cursor() as cursor:
        cursor.execute("DELETE FROM app_invoices")
        cursor.execute("DELETE FROM scheduler_items")


@pytest.fixture
def database(alias: str, scheduler_urls: dict[str, str]) -> Iterator[Database]:
    opened = open_database(scheduler_urls[alias])
    yield opened
    opened.dispose()


def _context(database: Database, period: datetime = PERIOD) -> RunContext:
    (claim,) = claims.claim(database, [Due("billing", period, 30, overlap_limit=None)], "a").won
    assert writes.start(database, claim) is model.Started.STARTED
    return context_for(database, claim)


def _invoice(alias: str, customer: str, n: int) -> None:
    with connections[alias].cursor() as cursor:
        cursor.execute("INSERT INTO app_invoices VALUES (%s, %s)", [customer, n])


def _invoices(alias: str) -> list[tuple[str, int]]:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT customer, n FROM app_invoices ORDER BY customer")
        return [(customer, n) for customer, n in cursor.fetchall()]


def _items(database: Database) -> dict[str, str]:
    return {row["key"]: row["state"] for row in rows(database, "scheduler_items")}


def test_the_record_commits_and_rolls_back_with_the_orms_transaction(
    alias: str, database: Database
) -> None:
    ctx = _context(database, PERIOD + timedelta(days=ALIASES.index(alias)))
    own = connections[alias]

    def fails_before_its_commit() -> None:
        with transaction.atomic(using=alias):
            assert ctx.once("customer:1", connection=own) is True
            _invoice(alias, "1", 1)
            raise RuntimeError("the job failed before its commit")

    with pytest.raises(RuntimeError):
        fails_before_its_commit()
    assert _items(database) == {}
    assert _invoices(alias) == []
    with transaction.atomic(using=alias):
        assert ctx.once("customer:1", connection=own) is True
        _invoice(alias, "1", 2)
    with transaction.atomic(using=alias):  # a retry, a takeover: nothing twice
        assert ctx.once("customer:1", connection=own) is False
        assert ctx.once("customer:2", connection=own) is True
        _invoice(alias, "2", 1)
    assert _invoices(alias) == [("1", 2), ("2", 1)]
    assert _items(database) == {"customer:1": "done", "customer:2": "done"}


def test_django_db_connection_itself_is_taken(scheduler_urls: dict[str, str]) -> None:
    """`from django.db import connection` is a proxy of the default alias's."""
    database = open_database(scheduler_urls["default"])
    try:
        ctx = _context(database, PERIOD + timedelta(days=10))
        with transaction.atomic():
            assert ctx.once("proxied", connection=connection) is True
        assert _items(database)["proxied"] == "done"
    finally:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("DELETE FROM scheduler_items")
        database.dispose()


def test_outside_atomic_the_connection_is_refused(alias: str, database: Database) -> None:
    ctx = _context(database, PERIOD + timedelta(days=20 + ALIASES.index(alias)))
    with pytest.raises(ValueError, match=r"must be inside transaction\.atomic\(\)"):
        ctx.once("k", connection=connections[alias])
    assert _items(database) == {}


def test_each_call_on_a_worker_thread_ends_with_its_connection_closed(alias: str) -> None:
    """CONN_MAX_AGE 0: Django closes a thread's connection at the end of each request,
    and here of each run; without the hook the worker thread would keep it open."""
    held: list[object] = []

    @job("* * * * *", name="orm")
    def orm() -> None:
        _invoice(alias, f"worker-{len(held)}", 1)
        held.append(connections[alias].connection)

    after: list[object] = []

    def worker(register: bool) -> None:
        if register:
            call_hooks.around_calls(fresh_connections)
        try:
            outcome = call(
                orm, RunContext("orm", PERIOD, "r", 1, "n", Origin.SCHEDULE, structlog.get_logger())
            )
            assert outcome.status is RunStatus.SUCCEEDED, outcome
            after.append(connections[alias].connection)
        finally:
            call_hooks.clear()
            connections.close_all()

    for register in (False, True):
        thread = threading.Thread(target=worker, args=(register,))
        thread.start()
        thread.join(30)
    assert all(opened is not None for opened in held)
    # Without the hook the run left its connection open on the thread; with it, closed.
    assert after[0] is held[0]
    assert after[1] is None


def _open_backends(url: str, pids: set[int]) -> set[int]:
    """Which of these PostgreSQL backends are still connected."""
    with psycopg.connect(url, autocommit=True) as watcher:
        found = watcher.execute(
            "SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", [sorted(pids)]
        ).fetchall()
    return {pid for (pid,) in found}


def test_with_persistent_connections_a_timeout_jobs_thread_closes_its_connection(
    scheduler_urls: dict[str, str],
) -> None:
    """CONN_MAX_AGE None: a worker thread keeps one connection from run to run, and the
    helper thread of a job with a timeout (a thread per run) closes its own as it ends,
    instead of leaving a session open until the garbage collector finds it (disabled
    here, so that when it would run does not decide the result)."""
    pids: list[int] = []

    def backend() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            (pid,) = cursor.fetchone()
        pids.append(pid)

    timed = job("* * * * *", name="orm-timed", timeout="30s")(backend)
    plain = job("* * * * *", name="orm-plain")(backend)
    executor = ThreadExecutor()
    outcomes: list[RunStatus] = []
    open_during: list[set[int]] = []

    def worker() -> None:
        for n in range(8):
            orm = timed if n % 4 else plain
            ctx = RunContext(
                orm.name, PERIOD, f"r{n}", 1, "n", Origin.SCHEDULE, structlog.get_logger()
            )
            outcomes.append(executor.call(orm, ctx, lambda child: None).status)
        open_during.append(_open_backends(scheduler_urls["default"], set(pids)))
        connections.close_all()

    persistent = connections.settings["default"]
    persistent["CONN_MAX_AGE"] = None
    call_hooks.around_calls(fresh_connections)
    gc.disable()
    try:
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join(60)
    finally:
        gc.enable()
        call_hooks.clear()
        persistent["CONN_MAX_AGE"] = 0
    assert outcomes == [RunStatus.SUCCEEDED] * 8
    # The two runs on the worker thread itself shared its connection; each helper
    # thread had its own, and closed it: the one worker holds one connection at most.
    assert pids[0] == pids[4]
    assert len(set(pids)) == 7
    assert open_during == [{pids[0]}]


def test_a_schedule_is_created_in_the_orms_transaction(alias: str, database: Database) -> None:
    """`Schedules.create(..., connection=connection)` inside `atomic()`: rolled back with
    the application's rows, or committed with them."""

    @job(None, name="tenant-report")
    def tenant_report(ctx: RunContext, tenant: str) -> None:
        del ctx, tenant

    own = connections[alias]

    def create_then_fail() -> None:
        with transaction.atomic(using=alias):
            schedules.create(
                "tenant-1", tenant_report, every="1h", args={"tenant": "1"}, connection=own
            )
            _invoice(alias, "tenant-1", 1)
            raise RuntimeError("the signup failed")

    with Schedules(database) as schedules:
        with pytest.raises(RuntimeError):
            create_then_fail()
        assert schedules.get("tenant-1") is None
        with transaction.atomic(using=alias):
            schedules.create(
                "tenant-1", tenant_report, every="1h", args={"tenant": "1"}, connection=own
            )
            _invoice(alias, "tenant-1", 1)
        created = schedules.get("tenant-1")
        assert created is not None
        assert created.args == {"tenant": "1"}
        schedules.delete("tenant-1")
    assert _invoices(alias) == [("tenant-1", 1)]


def test_a_schedule_is_paused_and_resumed_in_the_orms_transaction(
    alias: str, database: Database
) -> None:
    """A change reads the schedule's row through Django's connection, then writes it: on
    SQLite Django's connection parses DATETIME columns itself (naive), which the store
    takes as the UTC it wrote."""

    @job(None, name="tenant-report")
    def tenant_report(ctx: RunContext, tenant: str) -> None:
        del ctx, tenant

    own = connections[alias]
    with Schedules(database) as schedules:
        with transaction.atomic(using=alias):
            schedules.create(
                "tenant-2", tenant_report, every="1h", args={"tenant": "2"}, connection=own
            )
        with transaction.atomic(using=alias):
            paused = schedules.pause("tenant-2", connection=own)
            seen = schedules.get("tenant-2", connection=own)
        assert paused.paused
        assert seen is not None
        assert seen.paused
        assert seen.created_at.tzinfo is not None
        with transaction.atomic(using=alias):
            resumed = schedules.resume("tenant-2", connection=own)
        assert not resumed.paused
        assert resumed.next_due is not None
        assert resumed.next_due.tzinfo is not None
        schedules.delete("tenant-2")
