"""Jobs that run on Celery workers, and the Celery app both the nodes and the workers load.

Configured by the test through the environment: the broker, a queue of the test's own,
the job's lease, the message deadline and how long a body sleeps. Every execution
writes a line (period, holder, attempt) as evidence outside the runs table.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from celery import Celery

from scheduler import Pool, RunContext, job
from scheduler.celery import celery, install

BROKER = os.environ.get("CELERY_TEST_BROKER", "redis://127.0.0.1:6379/15")
QUEUE = os.environ.get("CELERY_TEST_QUEUE", "cronclaim-tests")
LEASE = os.environ.get("CELERY_TEST_LEASE", "3s")
DEADLINE = os.environ.get("CELERY_TEST_DEADLINE", "5s")

if os.environ.get("OTEL_TEST_SPANS"):
    # Both the node and the worker import this module: each sends its finished spans,
    # by the SDK's own console exporter, to one file the test reads.
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    _provider = TracerProvider()
    _provider.add_span_processor(
        SimpleSpanProcessor(
            ConsoleSpanExporter(
                out=Path(os.environ["OTEL_TEST_SPANS"]).open("a", buffering=1),  # noqa: SIM115
                formatter=lambda span: span.to_json(indent=None) + "\n",
            )
        )
    )
    trace.set_tracer_provider(_provider)

app = Celery("cronclaim_tests", broker=BROKER)
app.conf.update(
    worker_hijack_root_logger=False,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    broker_transport_options={
        "visibility_timeout": float(os.environ.get("CELERY_TEST_VISIBILITY", "3600")),
        "confirm_publish": True,
        # Redis: look for messages past their visibility timeout every second.
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    },
    task_default_queue=QUEUE,
)
if os.environ.get("SCHEDULER_DATABASE_URL"):
    install(app, jobs=[__name__], log_format="json")


def _evidence(ctx: RunContext) -> None:
    with Path(os.environ["EXECUTION_LOG"]).open("a") as log:
        log.write(f"{ctx.period.isoformat()} {ctx.node} {ctx.attempt}\n")


@job(
    cron=os.environ.get("CELERY_TEST_CRON", "* * * * * *"),
    name="remote_tick",
    lease=LEASE,
    overlap="allow",
    executor=celery(app=app, queue=QUEUE, deadline=DEADLINE),
)
def remote_tick(ctx: RunContext) -> None:
    """Sleeps a while (long enough to be killed inside it when a test asks)."""
    time.sleep(float(os.environ.get("CELERY_TEST_SLEEP", "0.05")))
    if ctx.cancelled.is_set():
        return
    _evidence(ctx)


@job(
    cron=None,
    name="remote_tenant",
    lease=LEASE,
    executor=celery(app=app, queue=QUEUE, deadline=DEADLINE),
)
def remote_tenant(ctx: RunContext, *, tenant: int) -> None:
    """A template run on the workers: each schedule created at run time gives it a tenant."""
    with Path(os.environ["EXECUTION_LOG"]).open("a") as log:
        log.write(f"{ctx.period.isoformat()} {ctx.node} {ctx.attempt} {ctx.schedule} {tenant}\n")


if os.environ.get("CELERY_TEST_SLOW"):

    @job(
        cron="* * * * * *",
        name="remote_slow",
        lease=LEASE,
        overlap="skip",
        executor=celery(app=app, queue=QUEUE, deadline=DEADLINE),
    )
    def remote_slow(ctx: RunContext) -> None:
        """Longer than its period: the periods due while it runs are skipped."""
        time.sleep(float(os.environ["CELERY_TEST_SLOW"]))
        _evidence(ctx)


if os.environ.get("CELERY_TEST_POOLED"):
    # Two jobs due at the same instants in a pool of one, on workers that could run both
    # at once: the pool lets one be queued at a time.
    REMOTE_POOL = Pool("remote", limit=1)

    def _pooled(ctx: RunContext) -> None:
        with Path(os.environ["EXECUTION_LOG"]).open("a") as log:
            log.write(f"{ctx.period.isoformat()} {ctx.job} start@{time.time():.3f}\n")
        time.sleep(1.0)
        with Path(os.environ["EXECUTION_LOG"]).open("a") as log:
            log.write(f"{ctx.period.isoformat()} {ctx.job} done@{time.time():.3f}\n")

    @job(
        cron="*/2 * * * * *",
        name="remote_pool_a",
        lease=LEASE,
        overlap="allow",
        pool=REMOTE_POOL,
        executor=celery(app=app, queue=QUEUE, deadline=DEADLINE),
    )
    def remote_pool_a(ctx: RunContext) -> None:
        _pooled(ctx)

    @job(
        cron="*/2 * * * * *",
        name="remote_pool_b",
        lease=LEASE,
        overlap="allow",
        pool=REMOTE_POOL,
        executor=celery(app=app, queue=QUEUE, deadline=DEADLINE),
    )
    def remote_pool_b(ctx: RunContext) -> None:
        _pooled(ctx)
