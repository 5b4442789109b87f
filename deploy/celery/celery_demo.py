"""The Celery demo of compose.celery.yaml: one app for the nodes and the workers, and a job
that runs every ten seconds on whichever worker takes its message.

Nodes: `scheduler run --jobs celery_demo`. Workers: `celery -A celery_demo worker -Q cron`.
"""

from __future__ import annotations

import os
import socket

from celery import Celery

from scheduler import RunContext, job
from scheduler.celery import celery, install

app = Celery("celery_demo", broker=os.environ.get("CELERY_BROKER_URL", "redis://redis:6379/0"))
app.conf.update(
    # A worker takes one message at a time: what waits stays in the queue, where any
    # worker can take it, instead of in one worker's prefetch buffer.
    worker_prefetch_multiplier=1,
    # Redis: a message a worker took and never acknowledged comes back after this long;
    # longer than any run, and the fence refuses the copy if it comes back sooner.
    broker_transport_options={"visibility_timeout": 3600},
    broker_connection_retry_on_startup=True,
)
if os.environ.get("SCHEDULER_DATABASE_URL"):
    install(app, jobs=["celery_demo"])


@job(
    cron="*/10 * * * * *",
    lease="30s",
    executor=celery(app=app, queue="cron", deadline="60s"),
)
def report(ctx: RunContext) -> None:
    ctx.log.info("report_written", worker=socket.gethostname(), queue="cron")
