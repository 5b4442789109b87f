"""The soak's jobs, loaded by every node (`--jobs tests.soak.jobs`). Each body writes the
ledger (`tests.soak.ledger`): `start` on entry, then how it left.

| job | schedule | body | options |
| --- | --- | --- | --- |
| `soak-tick` | every second | 0.1 s, polls `ctx.cancelled` | skip |
| `soak-slow` | every 5 s | 7 s of `time.sleep`: ignores `ctx.cancelled` | skip, lease 6 s |
| `soak-coop` | every 10 s | 8 s, polls `ctx.cancelled` every 0.1 s | skip, lease 6 s |
| `soak-process` | every 4 s | 1.5 s in a child process | `isolation="process"` |
| `soak-items` | every 2 s | `ctx.once(period, connection=...)`, a row in `soak_items` | retries 2 |
| `soak-flaky` | every 3 s | fails at attempt 1 of one period in three | retries 1 |
| `soak-queue` | every 2 s | 1.5 s, 5 s every fifth period | queue |
| `soak-allow` | every 3 s | 4 s: always two at once | allow |
| `soak-async` | every 2 s | `async def`, 0.5 s | skip |
| `soak-tenant` | a template: `SCHEDULES` at run time | 0.3 s, polls `ctx.cancelled` | skip |
| `soak-pool-a`, `-b` | every 2 s, both | 0.5 s, polls `ctx.cancelled` | allow, a pool of 1 |

Every body but `soak-slow` stops when `ctx.cancelled` is set (the child process of
`soak-process` is killed instead), so that only `soak-slow` can complete after its
node gave its run up. `soak_items` has no unique constraint: a key done twice is two
rows.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from scheduler import Pool, RunContext, job
from tests.soak import ledger

DATABASE_ENV = "SOAK_DATABASE_URL"
SHORT_LEASE = "6s"
ITEMS_TABLE = "soak_items"
ITEMS_DDL = (
    f"CREATE TABLE IF NOT EXISTS {ITEMS_TABLE} (key text NOT NULL, run_id text NOT NULL,"
    " attempt integer NOT NULL, node text NOT NULL, at timestamptz NOT NULL DEFAULT now())"
)


class FailingError(RuntimeError):
    """The failure `soak-flaky` raises on purpose."""


def _seconds(period: datetime) -> int:
    return int(period.timestamp())


def flaky_fails(period: datetime, attempt: int) -> bool:
    """Whether `soak-flaky` fails on purpose: attempt 1 of one period in three."""
    return attempt == 1 and (_seconds(period) // 3) % 3 == 0


def queue_seconds(period: datetime) -> float:
    """`soak-queue`'s body: 5 s every fifth period (the queue fills, the next skips)."""
    return 5.0 if (_seconds(period) // 2) % 5 == 0 else 1.5


def _wait(ctx: RunContext, seconds: float) -> bool:
    """Work for `seconds`, looking at `ctx.cancelled` every 0.1 s; False if it was set."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if ctx.cancelled.wait(min(0.1, left)):
            return False
    return not ctx.cancelled.is_set()


def _cooperative(ctx: RunContext, work: Callable[[], bool]) -> None:
    """start, then `end` if `work` completed, `cancelled` if it stopped for
    ctx.cancelled, `error` if it raised."""
    ledger.note(ctx, ledger.START)
    try:
        done = work()
    except BaseException:
        ledger.note(ctx, ledger.ERROR)
        raise
    ledger.note(ctx, ledger.END if done else ledger.CANCELLED)


@job(cron="* * * * * *", name="soak-tick")
def tick(ctx: RunContext) -> None:
    _cooperative(ctx, lambda: _wait(ctx, 0.1))


@job(cron="*/5 * * * * *", name="soak-slow", lease=SHORT_LEASE)
def slow(ctx: RunContext) -> None:
    """Ignores ctx.cancelled: the one body that may complete after its run was given up."""
    ledger.note(ctx, ledger.START)
    time.sleep(7)
    ledger.note(ctx, ledger.END)


@job(cron="*/10 * * * * *", name="soak-coop", lease=SHORT_LEASE)
def coop(ctx: RunContext) -> None:
    _cooperative(ctx, lambda: _wait(ctx, 8))


@job(cron="*/4 * * * * *", name="soak-process", isolation="process")
def in_child(ctx: RunContext) -> None:
    """Runs in a child process, which the node kills when it gives the run up."""
    ledger.note(ctx, ledger.START)
    time.sleep(1.5)
    ledger.note(ctx, ledger.END)


_engines: dict[str, Any] = {}


def _engine() -> Any:
    """This node's SQLAlchemy engine on the scheduler's database, through its proxy; no
    pool, so that a connection broken by a fault is never handed out again."""
    import sqlalchemy  # noqa: PLC0415
    from sqlalchemy.pool import NullPool  # noqa: PLC0415

    url = os.environ[DATABASE_ENV].replace("postgresql://", "postgresql+psycopg://", 1)
    if url not in _engines:
        _engines[url] = sqlalchemy.create_engine(
            url,
            poolclass=NullPool,
            connect_args={
                "connect_timeout": 3,
                "options": "-c statement_timeout=5000 -c idle_in_transaction_session_timeout=5000",
            },
        )
    return _engines[url]


def _work_before_commit(ctx: RunContext) -> None:
    if not _wait(ctx, 0.2):
        raise RuntimeError("cancelled before commit: the transaction rolls back")


@job(cron="*/2 * * * * *", name="soak-items", retries=2, retry_backoff="1s")
def items(ctx: RunContext) -> None:
    """One key per period, through `ctx.once` in the job's own transaction, and a row in
    `soak_items` in that same transaction: a key done twice would be two rows. Writes
    `end` when it did the item, `seen` when an earlier attempt had (not a completion of
    the work: rule 2 judges this job's effects)."""
    import sqlalchemy  # noqa: PLC0415

    ledger.note(ctx, ledger.START)
    try:
        with _engine().begin() as connection:
            fresh = ctx.once(f"item-{ctx.period.isoformat()}", connection=connection)
            if fresh:
                connection.execute(
                    sqlalchemy.text(
                        f"INSERT INTO {ITEMS_TABLE} (key, run_id, attempt, node)"
                        " VALUES (:key, :run_id, :attempt, :node)"
                    ),
                    {
                        "key": f"item-{ctx.period.isoformat()}",
                        "run_id": ctx.run_id,
                        "attempt": ctx.attempt,
                        "node": ctx.node,
                    },
                )
            _work_before_commit(ctx)
    except BaseException:
        ledger.note(ctx, ledger.ERROR)
        raise
    ledger.note(ctx, ledger.END if fresh else ledger.SEEN)


@job(cron="*/3 * * * * *", name="soak-flaky", retries=1, retry_backoff="1s")
def flaky(ctx: RunContext) -> None:
    ledger.note(ctx, ledger.START)
    if flaky_fails(ctx.period, ctx.attempt):
        ledger.note(ctx, ledger.FAIL)
        raise FailingError(f"attempt 1 of {ctx.period.isoformat()} fails on purpose")
    done = _wait(ctx, 0.2)
    ledger.note(ctx, ledger.END if done else ledger.CANCELLED)


@job(cron="*/2 * * * * *", name="soak-queue", overlap="queue")
def queued(ctx: RunContext) -> None:
    _cooperative(ctx, lambda: _wait(ctx, queue_seconds(ctx.period)))


@job(cron="*/3 * * * * *", name="soak-allow", overlap="allow")
def allowed(ctx: RunContext) -> None:
    _cooperative(ctx, lambda: _wait(ctx, 4))


@job(cron="*/2 * * * * *", name="soak-async")
async def coroutine(ctx: RunContext) -> None:
    ledger.note(ctx, ledger.START)
    try:
        for _ in range(5):
            if ctx.cancelled.is_set():
                ledger.note(ctx, ledger.CANCELLED)
                return
            await asyncio.sleep(0.1)
    except asyncio.CancelledError:
        ledger.note(ctx, ledger.CANCELLED)
        raise
    ledger.note(ctx, ledger.END)


# Two jobs due at the same instants in a pool of one: every period one of them waits for
# the other's slot (`waiting (pool)`); rule 5 holds them to one body at a time.
SOAK_POOL = Pool("soak-pool", limit=1)


@job(cron="*/2 * * * * *", name="soak-pool-a", pool=SOAK_POOL, overlap="allow")
def pooled_a(ctx: RunContext) -> None:
    _cooperative(ctx, lambda: _wait(ctx, 0.5))


@job(cron="*/2 * * * * *", name="soak-pool-b", pool=SOAK_POOL, overlap="allow")
def pooled_b(ctx: RunContext) -> None:
    _cooperative(ctx, lambda: _wait(ctx, 0.5))


@job(cron=None, name="soak-tenant")
def tenant(ctx: RunContext, *, seconds: float) -> None:
    """The template of the schedules created at run time (`SCHEDULES`): its runs are the
    runs of `@<key>`, judged by the same rules as every job's."""
    _cooperative(ctx, lambda: _wait(ctx, seconds))


# The schedules the soak creates once the nodes are up: key → (interval in seconds,
# the body's seconds). Their periods are start + k·interval.
SCHEDULES = {
    "tenant-1:every-second": (1, 0.3),
    "tenant-2:every-second": (1, 0.3),
    "tenant-3:every-2s": (2, 0.3),
    "tenant-4:every-3s": (3, 0.3),
}
TEMPLATE = "soak-tenant"


# What the checker needs to know of the jobs above, without importing the scheduler's
# registry: the exempt body of rule 1's window (a), and the overlap of each job.
NON_COOPERATIVE = "soak-slow"
ITEMS_JOB = "soak-items"
