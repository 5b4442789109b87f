"""Calling a job's function once, in whatever thread or process the executor chose: its
log lines bound to the run, its exception turned into data.

Whatever the job raises is the job's: `TimeoutError` from its own client, `SystemExit`,
`KeyboardInterrupt`, a `CancelledError` of its own tasks, any `BaseException`. Each is a
failure of the attempt with its traceback. Only the call itself is guarded: nothing of
ours around it swallows a `BaseException`, and the one thing re-raised is the
cancellation of a coroutine's own task, which only its executor asks for (its deadline).
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

from structlog.contextvars import bind_contextvars, bound_contextvars

from scheduler import call_hooks
from scheduler.registry import Job
from scheduler.run.context import RunContext
from scheduler.run.failures import SUCCEEDED, Outcome, failed


def run_fields(context: RunContext) -> dict[str, Any]:
    """What every log line the job's own code writes is bound with (structlog's context
    variables, which the standard library's records get too)."""
    return {
        "job": context.job,
        "period": context.period.isoformat(),
        "run_id": context.run_id,
        "attempt": context.attempt,
        "node": context.node,
        **context.trace,
    }


def arguments(job: Job, context: RunContext) -> tuple[Any, ...]:
    return (context,) if job.takes_context else ()


def call(job: Job, context: RunContext) -> Outcome:
    """Call a plain function in this thread, in a copy of its context: the run's fields
    bound there need no unbinding after (a third of the cost of `bound_contextvars`),
    and nothing the job binds outlives its run."""
    return contextvars.copy_context().run(_call_bound, job, context)


def _call_bound(job: Job, context: RunContext) -> Outcome:
    bind_contextvars(**run_fields(context))
    around = call_hooks.registered()
    try:
        if around:  # what an app wraps every call in (Django's connections)
            with call_hooks.entered(around):
                job.func(*arguments(job, context), **job.args)
        else:
            job.func(*arguments(job, context), **job.args)
    except BaseException as error:  # noqa: BLE001 - the job's, SystemExit too: data, not our exit
        return failed(error)
    return SUCCEEDED


async def bound(job: Job, context: RunContext) -> Any:
    """The job's coroutine, its log lines bound to the run (a task has its own context)."""
    with bound_contextvars(**run_fields(context)):
        return await job.func(*arguments(job, context), **job.args)


async def call_async(job: Job, context: RunContext) -> Outcome:
    """Await a coroutine function on the running loop, as the task's outermost coroutine:
    a `SystemExit` or `KeyboardInterrupt` that reached the task would stop the event loop
    itself. A `CancelledError` is the job's unless this task was asked to stop (the
    executor's deadline), which is re-raised for the executor to see."""
    try:
        await bound(job, context)
    except asyncio.CancelledError as error:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        return failed(error)
    except BaseException as error:  # noqa: BLE001 - the job's, SystemExit too: data, not our exit
        return failed(error)
    return SUCCEEDED
