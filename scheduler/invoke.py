"""Calling a job's function under its timeout: in this thread, on the event loop, or in
a child process that can be killed.

A thread cannot be killed: a plain function that outlives its timeout is recorded
`timed_out`, told to stop through `ctx.cancelled`, and left to return on its own.
Use `isolation="process"` for work that must really stop.
"""

from __future__ import annotations

import asyncio
import importlib
import multiprocessing
import threading
import traceback
from dataclasses import dataclass
from datetime import datetime
from multiprocessing.connection import Connection
from typing import Any

from scheduler import logs
from scheduler.context import RunContext
from scheduler.ledger import Ledger
from scheduler.logs import LogFormat
from scheduler.policy import Isolation
from scheduler.registry import Job
from scheduler.states import Origin, RunStatus
from scheduler.store.database import open_database
from scheduler.store.runs import Claim, Failure

TRACEBACK_LIMIT = 4000
MESSAGE_LIMIT = 2000
CHILD_POLL_S = 0.1


@dataclass(frozen=True)
class Outcome:
    status: RunStatus
    failure: Failure | None = None


SUCCEEDED = Outcome(RunStatus.SUCCEEDED)


def describe(error: BaseException) -> Failure:
    """A job's exception as stored data: qualified type, message, traceback tail."""
    return Failure(
        type=f"{type(error).__module__}.{type(error).__qualname__}",
        message=_storable(str(error))[:MESSAGE_LIMIT],
        traceback=_storable("".join(traceback.format_exception(error)))[-TRACEBACK_LIMIT:],
    )


def _storable(text: str) -> str:
    """PostgreSQL text cannot hold NUL; a message carrying one must not wedge its outcome."""
    return text.replace("\x00", "\\x00")


def invoke(job: Job, context: RunContext, loop: asyncio.AbstractEventLoop | None) -> Outcome:
    """Run the job once and say how it ended; the job's errors never escape."""
    timeout = job.policy.timeout.total_seconds() if job.policy.timeout else None
    if job.policy.isolation is Isolation.PROCESS:
        return _in_child(job, context, timeout)
    if job.is_async:
        assert loop is not None, "coroutine jobs need the dispatcher's event loop"
        return _on_loop(job, context, loop, timeout)
    if timeout is None:
        return _direct(job, context)
    return _in_thread(job, context, timeout)


def _arguments(job: Job, context: RunContext) -> tuple[Any, ...]:
    return (context,) if job.takes_context else ()


def _direct(job: Job, context: RunContext) -> Outcome:
    try:
        job.func(*_arguments(job, context))
    except Exception as error:  # noqa: BLE001 - a job's failure is data, not our crash
        return Outcome(RunStatus.FAILED, describe(error))
    return SUCCEEDED


def _in_thread(job: Job, context: RunContext, timeout: float) -> Outcome:
    """Run in a helper thread so that the caller can stop waiting at the deadline."""
    result: list[Outcome] = []
    runner = threading.Thread(
        target=lambda: result.append(_direct(job, context)), name=f"job:{job.name}", daemon=True
    )
    runner.start()
    runner.join(timeout)
    if runner.is_alive():
        context.cancelled.set()
        return _timed_out(timeout)
    return result[0]


def _on_loop(
    job: Job, context: RunContext, loop: asyncio.AbstractEventLoop, timeout: float | None
) -> Outcome:
    future = asyncio.run_coroutine_threadsafe(job.func(*_arguments(job, context)), loop)
    try:
        future.result(timeout)
    except TimeoutError:
        context.cancelled.set()
        future.cancel()
        return _timed_out(timeout)
    except Exception as error:  # noqa: BLE001 - a job's failure is data, not our crash
        return Outcome(RunStatus.FAILED, describe(error))
    return SUCCEEDED


def _timed_out(timeout: float | None) -> Outcome:
    return Outcome(
        RunStatus.TIMED_OUT,
        Failure(type="TimeoutError", message=f"did not finish within {timeout:g}s", traceback=""),
    )


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


def _in_child(job: Job, context: RunContext, timeout: float | None) -> Outcome:
    """Run in a fresh interpreter; kill it at the deadline or when the run is cancelled."""
    spawn = multiprocessing.get_context("spawn")
    receiver, sender = spawn.Pipe(duplex=False)
    payload = ChildRun(
        module=job.func.__module__,
        job=job.name,
        period=context.period,
        run_id=context.run_id,
        attempt=context.attempt,
        node=context.node,
        origin=context.origin,
        log_settings=logs.current(),
        claim=context.ledger.claim if context.ledger else None,
        database_url=(
            context.ledger.database.engine.url.render_as_string(hide_password=False)
            if context.ledger
            else None
        ),
    )
    child = spawn.Process(target=child_main, args=(payload, sender), name=f"job:{job.name}")
    child.start()
    sender.close()
    waited = 0.0
    while child.is_alive():
        child.join(CHILD_POLL_S)
        waited += CHILD_POLL_S
        if timeout is not None and waited >= timeout:
            child.kill()
            child.join()
            context.cancelled.set()
            return _timed_out(timeout)
        if context.cancelled.is_set():
            child.kill()
            child.join()
            return Outcome(RunStatus.FAILED, Failure("Cancelled", "the run was cancelled", ""))
    return _child_result(receiver, child.exitcode)


def _child_result(receiver: Connection, exitcode: int | None) -> Outcome:
    if receiver.poll():
        failure = receiver.recv()
        return SUCCEEDED if failure is None else Outcome(RunStatus.FAILED, failure)
    return Outcome(
        RunStatus.FAILED,
        Failure("ChildProcessError", f"the job's process ended with exit code {exitcode}", ""),
    )


def child_main(payload: ChildRun, sender: Connection) -> None:
    """Entry point of the child: import the job's module, call it, send back the outcome."""
    logs.configure(*payload.log_settings)
    module = importlib.import_module(payload.module)
    job = next(
        candidate
        for candidate in vars(module).values()
        if isinstance(candidate, Job) and candidate.name == payload.job
    )
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
        ledger=_child_ledger(payload),
    )
    outcome = asyncio.run(_await(job, context)) if job.is_async else _direct(job, context)
    sender.send(outcome.failure)
    sender.close()


def _child_ledger(payload: ChildRun) -> Ledger | None:
    if payload.claim is None or payload.database_url is None:
        return None
    return Ledger(open_database(payload.database_url, pool_size=1), payload.claim)


async def _await(job: Job, context: RunContext) -> Outcome:
    try:
        await job.func(*_arguments(job, context))
    except Exception as error:  # noqa: BLE001 - a job's failure is data, not our crash
        return Outcome(RunStatus.FAILED, describe(error))
    return SUCCEEDED
