"""Calling a job's function under its timeout: in this thread, on the event loop, or in
a child process that can be killed.

A thread cannot be killed: a plain function that outlives its timeout is recorded
`timed_out`, told to stop through `ctx.cancelled`, and left to return on its own; the
outcome says it is still running (`lingering`), so that its retry waits for it. Use
`isolation="process"` for work that must really stop.

A child process never outlives its node: it watches a pipe whose other end only the
node holds, and leaves at once when the node is gone (SIGKILL included); the node
kills it itself when the run is cancelled, lost or abandoned.
"""

from __future__ import annotations

import asyncio
import importlib
import multiprocessing
import os
import signal
import threading
import traceback
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from structlog.contextvars import bound_contextvars
from structlog.tracebacks import extract

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
# The exit status of a child that found its node gone.
ORPHANED_EXIT = 70
# Told about the child process of a run as soon as it exists, so that the dispatcher
# can kill it itself.
Attach = Callable[[BaseProcess], None]


@dataclass(frozen=True)
class Outcome:
    status: RunStatus
    failure: Failure | None = None
    # A function that outlived its timeout in its thread and still runs there.
    lingering: threading.Thread | None = field(default=None, compare=False)


SUCCEEDED = Outcome(RunStatus.SUCCEEDED)


def describe(error: BaseException) -> Failure:
    """A job's exception as stored data: its type (module-qualified, but a built-in's
    bare, as people write it), message and traceback tail; and for the log, the
    traceback as data (each exception of the chain with its frames, no locals)."""
    kind = type(error)
    name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )
    return Failure(
        type=_storable(name),
        message=_storable(str(error))[:MESSAGE_LIMIT],
        traceback=_storable("".join(traceback.format_exception(error)))[-TRACEBACK_LIMIT:],
        trace=_trace(error),
    )


def _trace(error: BaseException) -> tuple[dict[str, Any], ...]:
    """structlog's dict form of a traceback (what `dict_tracebacks` logs), without the
    frames' local variables, which may hold secrets."""
    extracted = extract(type(error), error, error.__traceback__, show_locals=False)
    return tuple(
        {
            "exc_type": stack.exc_type,
            "exc_value": _storable(stack.exc_value)[:MESSAGE_LIMIT],
            "is_cause": stack.is_cause,
            "frames": [
                {"filename": frame.filename, "lineno": frame.lineno, "name": frame.name}
                for frame in stack.frames
            ],
        }
        for stack in extracted.stacks
    )


def _storable(text: str) -> str:
    """Text any database takes: PostgreSQL's cannot hold NUL, and no driver can encode a
    lone surrogate (what decoding bytes with errors="surrogateescape" leaves); a message
    carrying either must not wedge its outcome."""
    cleaned = text.replace("\x00", "\\x00")
    return cleaned.encode("utf-8", "backslashreplace").decode("utf-8")


def invoke(
    job: Job,
    context: RunContext,
    loop: asyncio.AbstractEventLoop | None,
    attach: Attach | None = None,
) -> Outcome:
    """Run the job once and say how it ended; the job's errors never escape."""
    timeout = job.policy.timeout.total_seconds() if job.policy.timeout else None
    if job.policy.isolation is Isolation.PROCESS:
        return _in_child(job, context, timeout, attach)
    if job.is_async:
        assert loop is not None, "coroutine jobs need the dispatcher's event loop"
        return _on_loop(job, context, loop, timeout)
    if timeout is None:
        return _direct(job, context)
    return _in_thread(job, context, timeout)


def _arguments(job: Job, context: RunContext) -> tuple[Any, ...]:
    return (context,) if job.takes_context else ()


def run_fields(context: RunContext) -> dict[str, Any]:
    """What every log line the job's own code writes is bound with (structlog's context
    variables, which the standard library's records get too)."""
    return {
        "job": context.job,
        "period": context.period.isoformat(),
        "run_id": context.run_id,
        "attempt": context.attempt,
        "node": context.node,
    }


def _direct(job: Job, context: RunContext) -> Outcome:
    try:
        with bound_contextvars(**run_fields(context)):
            job.func(*_arguments(job, context))
    except Exception as error:  # noqa: BLE001 - a job's failure is data, not our crash
        return Outcome(RunStatus.FAILED, describe(error))
    return SUCCEEDED


async def _bound(job: Job, context: RunContext) -> Any:
    """The job's coroutine, its log lines bound to the run (a task has its own context)."""
    with bound_contextvars(**run_fields(context)):
        return await job.func(*_arguments(job, context))


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
        return Outcome(RunStatus.TIMED_OUT, _timed_out(timeout).failure, lingering=runner)
    return result[0]


def _on_loop(
    job: Job, context: RunContext, loop: asyncio.AbstractEventLoop, timeout: float | None
) -> Outcome:
    future = asyncio.run_coroutine_threadsafe(_bound(job, context), loop)
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


def _in_child(
    job: Job, context: RunContext, timeout: float | None, attach: Attach | None
) -> Outcome:
    """Run in a fresh interpreter; kill it at the deadline or when the run is cancelled."""
    spawn = multiprocessing.get_context("spawn")
    receiver, sender = spawn.Pipe(duplex=False)
    # Only this process holds `lifeline`'s writing end: when it dies, the child reads EOF.
    watched, lifeline = spawn.Pipe(duplex=False)
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
    child = spawn.Process(
        target=child_main, args=(payload, sender, watched), name=f"job:{job.name}"
    )
    child.start()
    sender.close()
    watched.close()
    try:
        if attach is not None:
            attach(child)
        return _watch_child(child, receiver, context, timeout)
    finally:
        lifeline.close()


def _watch_child(
    child: BaseProcess, receiver: Connection, context: RunContext, timeout: float | None
) -> Outcome:
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


def child_main(payload: ChildRun, sender: Connection, lifeline: Connection) -> None:
    """Entry point of the child: import the job's module, call it, send back the outcome."""
    # Ctrl-C reaches the whole process group; the node decides when its children stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_leave_with_node, args=(lifeline,), daemon=True).start()
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


def _leave_with_node(lifeline: Connection) -> None:
    """Block until the node's end of the pipe closes (the node is gone), then leave."""
    with suppress(EOFError, OSError):
        lifeline.recv_bytes()
    os._exit(ORPHANED_EXIT)


def _child_ledger(payload: ChildRun) -> Ledger | None:
    if payload.claim is None or payload.database_url is None:
        return None
    return Ledger(open_database(payload.database_url, connections=2), payload.claim)


async def _await(job: Job, context: RunContext) -> Outcome:
    try:
        await _bound(job, context)
    except Exception as error:  # noqa: BLE001 - a job's failure is data, not our crash
        return Outcome(RunStatus.FAILED, describe(error))
    return SUCCEEDED
