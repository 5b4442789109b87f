"""`install(app, ...)`: the task a Celery worker runs for every period sent to it.

Call it in the module `celery -A` loads, with the database the nodes claim in and the
job modules (those the nodes load with `--jobs`). Each worker process opens its own
engine and imports the jobs on its first delivery (after the fork of a prefork pool).

The task is acknowledged late (after the function returned and its outcome is written)
and rejected back to the queue when its worker process dies, so that a message a worker
took but never started is delivered again at once; a copy that comes back after the
run started is refused by the fence, never run twice. Every way a delivery ends
acknowledges it: a stale message is logged, not retried by Celery.

A worker watches its runs as a node does, configured by the same environment
(`SCHEDULER_TRACING`, `SCHEDULER_SENTRY_*`): its span of an attempt continues the trace
of the node that sent it, whose context comes in the message's headers.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Sequence
from functools import partial
from typing import Any

from celery import signals

from scheduler import logs
from scheduler.alerting import environment as alerting_environment
from scheduler.alerting.propagation import fields as trace_fields
from scheduler.celery.executor import TASK_NAME
from scheduler.errors import UserError
from scheduler.logs import LogFormat
from scheduler.registry import load_jobs
from scheduler.run.delivered import WorkerRuns
from scheduler.run.job_table import JobTable
from scheduler.store.database import open_database

DATABASE_VARIABLE = "SCHEDULER_DATABASE_URL"
JOBS_VARIABLE = "SCHEDULER_JOBS"
# A prefork child handles one delivery at a time: a small pool (a threads pool of N
# threads wants about N; see `install(connections=...)`).
CONNECTIONS = 4


class _Process:
    """This worker process's database, jobs and runs, made on its first delivery."""

    def __init__(
        self, database_url: str, jobs: Sequence[str], log_format: LogFormat, connections: int
    ) -> None:
        self._database_url = database_url
        self._connections = connections
        self._jobs = list(jobs)
        self._log_format = log_format
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._runs: WorkerRuns | None = None

    def runs(self, hostname: str) -> WorkerRuns:
        with self._lock:
            if self._runs is None or self._pid != os.getpid():
                level = os.environ.get("SCHEDULER_LOG_LEVEL", "info")
                logs.configure(self._log_format, level, stream=sys.__stdout__)
                log = logs.get_logger(worker=hostname)
                database = open_database(self._database_url, connections=self._connections)
                jobs = load_jobs(self._jobs)
                observers = alerting_environment.observers(os.environ)
                # Its jobs, and the schedules created at run time over them (`@<key>`).
                table = JobTable(jobs, database)
                self._runs = WorkerRuns(database, table, hostname, log, observers)
                self._pid = os.getpid()
                log.info("worker_ready", jobs=len(jobs), pid=self._pid)
            return self._runs


def _trace_of(request: Any) -> dict[str, str]:
    """The sender's trace context: Celery keeps a message's own headers both as attributes
    of the request and in its `headers`."""
    headers = getattr(request, "headers", None) or {}
    found: dict[str, str] = {}
    for key in trace_fields():
        value = getattr(request, key, None) or headers.get(key)
        if isinstance(value, str):
            found[key] = value
    return found


def _missing(url: str, names: Sequence[str]) -> str | None:
    if not url:
        return f"scheduler.celery.install: give database_url= or set {DATABASE_VARIABLE}"
    if not names:
        return f"scheduler.celery.install: give jobs= or set {JOBS_VARIABLE}"
    return None


def _refuse(message: str, **_signal: Any) -> None:
    """A worker without its database or jobs must not take messages: it exits, saying why
    (Celery logs and swallows an ordinary exception from a signal handler)."""
    raise SystemExit(f"error: {message}")


def _check_alerting(**_signal: Any) -> None:
    """A bad `SCHEDULER_TRACING` or `SCHEDULER_SENTRY_*` stops the worker at its start, as
    it stops a node, rather than fail every delivery."""
    try:
        alerting_environment.check(os.environ)
    except UserError as error:
        _refuse(str(error))


def install(
    app: Any,
    *,
    database_url: str | None = None,
    jobs: Sequence[str] | str | None = None,
    log_format: str = "auto",
    connections: int = CONNECTIONS,
) -> Any:
    """Register the `scheduler.run` task on `app`; returns the task.

    `database_url` and `jobs` default to SCHEDULER_DATABASE_URL and SCHEDULER_JOBS (a
    comma-separated list), as for `scheduler run`; a worker without them refuses to
    start (a node importing the same module needs neither). `connections`: the database
    pool of each worker process.
    """
    url = database_url or os.environ.get(DATABASE_VARIABLE, "")
    entries = jobs if jobs is not None else os.environ.get(JOBS_VARIABLE, "")
    names = (
        [entry for entry in entries.split(",") if entry] if isinstance(entries, str) else entries
    )
    missing = _missing(url, names)
    if missing:
        # The nodes import this module too, and need neither: only a worker refuses to
        # start without them.
        signals.worker_init.connect(partial(_refuse, missing), weak=False)
    else:
        signals.worker_init.connect(_check_alerting, weak=False)
    try:
        chosen = LogFormat(log_format)
    except ValueError:
        raise UserError(
            "scheduler.celery.install: log_format must be auto, json or console, "
            f"got {log_format!r}"
        ) from None
    process = _Process(url, names, chosen, connections)

    @app.task(  # type: ignore[untyped-decorator]
        name=TASK_NAME,
        bind=True,
        acks_late=True,
        reject_on_worker_lost=True,
        ignore_result=True,
        max_retries=0,
    )
    def run_period(task: Any, **body: Any) -> str:
        hostname = str(getattr(task.request, "hostname", None) or f"celery@{socket.gethostname()}")
        return process.runs(hostname).deliver(body, _trace_of(task.request)).value

    return run_period
