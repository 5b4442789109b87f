"""The child-process side of `isolation="process"`: a fresh interpreter imports the
job's module, rebuilds the run's context, calls the job and sends its failure back.

A child never outlives its node: it watches a pipe whose other end only the node holds,
and leaves at once when the node is gone (SIGKILL included).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import signal
import threading
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, field, replace
from datetime import datetime
from multiprocessing.connection import Connection
from typing import Any

from scheduler import logs
from scheduler.logs import LogFormat
from scheduler.model import Claim, Failure
from scheduler.registry import Job
from scheduler.run.calling import call, call_async
from scheduler.run.context import RunContext
from scheduler.run.failures import describe
from scheduler.run.items import RunItems
from scheduler.states import Origin
from scheduler.store.database import open_database

# The exit status of a child that found its node gone.
ORPHANED_EXIT = 70


@dataclass(frozen=True)
class ChildRun:
    """What a child process needs to find the job and rebuild its context."""

    module: str
    job: str
    period: datetime
    run_id: str
    attempt: int
    node: str
    origin: Origin
    log_settings: tuple[LogFormat, str]
    # For ctx.once/item/checkpoint: the child opens its own engine on this database.
    claim: Claim | None = None
    database_url: str | None = None
    # A schedule's run: the code-declared job it is made of, and its arguments.
    template: str | None = None
    args: Mapping[str, Any] = field(default_factory=dict)


def child_main(payload: ChildRun, sender: Connection, lifeline: Connection) -> None:
    """Entry point of the child: import the job's module, call it, send back the outcome.

    Whatever the job's code raises, at import or in the call, `SystemExit` and
    `KeyboardInterrupt` included, goes back as its failure with the traceback (the exit
    status alone would say nothing of it)."""
    # Ctrl-C reaches the whole process group; the node decides when its children stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_leave_with_node, args=(lifeline,), daemon=True).start()
    logs.configure(*payload.log_settings)
    try:
        failure = _call(payload)
    except BaseException as error:  # noqa: BLE001 - the job module's: data, not an exit status
        failure = describe(error)
    sender.send(failure)
    sender.close()


def _call(payload: ChildRun) -> Failure | None:
    module = importlib.import_module(payload.module)
    name = payload.template or payload.job
    job = next(
        candidate
        for candidate in vars(module).values()
        if isinstance(candidate, Job) and candidate.name == name
    )
    if payload.template is not None:
        job = replace(job, name=payload.job, args=payload.args, template=payload.template)
    context = RunContext(
        job=payload.job,
        period=payload.period,
        run_id=payload.run_id,
        attempt=payload.attempt,
        node=payload.node,
        origin=payload.origin,
        log=logs.get_logger(
            job=payload.job,
            period=payload.period.isoformat(),
            run_id=payload.run_id,
            attempt=payload.attempt,
            node=payload.node,
        ),
        run_items=_child_items(payload),
        args=payload.args,
    )
    outcome = asyncio.run(call_async(job, context)) if job.is_async else call(job, context)
    return outcome.failure


def _leave_with_node(lifeline: Connection) -> None:
    """Block until the node's end of the pipe closes (the node is gone), then leave."""
    with suppress(EOFError, OSError):
        lifeline.recv_bytes()
    os._exit(ORPHANED_EXIT)


def _child_items(payload: ChildRun) -> RunItems | None:
    if payload.claim is None or payload.database_url is None:
        return None
    # Not proved at once: the database may be away this instant (a restart) and back by
    # the time the job asks for an item; only a call the job makes may fail for it.
    database = open_database(payload.database_url, connections=2, prove=False)
    return RunItems(database, payload.claim)
