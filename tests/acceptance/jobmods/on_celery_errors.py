"""Celery jobs whose own exceptions are theirs, and their Celery app (the worker's `-A`):
an async job whose client raises the built-in `TimeoutError`, and a function raising
`SystemExit`. A worker records each as a failed attempt with its traceback; neither may
pass for a timeout, kill the worker's pool process, or leave its run `running`.

Configured like `on_celery` through the environment: the broker and a queue of the
test's own. Every call writes a line to EXECUTION_LOG.
"""

from __future__ import annotations

import asyncio
import os

from celery import Celery

from scheduler import RunContext, job
from scheduler.celery import celery, install
from tests.acceptance.jobmods.evidence import note

BROKER = os.environ.get("CELERY_TEST_BROKER", "redis://127.0.0.1:6379/15")
QUEUE = os.environ.get("CELERY_TEST_QUEUE", "cronclaim-tests")

app = Celery("cronclaim_own_errors", broker=BROKER)
app.conf.update(
    worker_hijack_root_logger=False,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    task_default_queue=QUEUE,
)
if os.environ.get("SCHEDULER_DATABASE_URL"):
    install(app, jobs=[__name__], log_format="json")


@job(cron="0 0 1 1 *", name="remote-waits-too-little", executor=celery(app=app, queue=QUEUE))
async def remote_waits_too_little(ctx: RunContext) -> None:
    note(ctx, "attempt")
    await asyncio.wait_for(asyncio.sleep(10), 0.05)


@job(cron="0 0 1 1 *", name="remote-system-exit", executor=celery(app=app, queue=QUEUE))
def remote_system_exit(ctx: RunContext) -> None:
    note(ctx, "attempt")
    raise SystemExit(3)
