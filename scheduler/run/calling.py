"""Calling a job's function once, in whatever thread or process the executor chose: its
log lines bound to the run, its exception turned into data."""

from __future__ import annotations

import contextvars
from typing import Any

from structlog.contextvars import bind_contextvars, bound_contextvars

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
    try:
        bind_contextvars(**run_fields(context))
        job.func(*arguments(job, context))
    except Exception as error:  # noqa: BLE001 - a job's failure is data, not our crash
        return failed(error)
    return SUCCEEDED


async def bound(job: Job, context: RunContext) -> Any:
    """The job's coroutine, its log lines bound to the run (a task has its own context)."""
    with bound_contextvars(**run_fields(context)):
        return await job.func(*arguments(job, context))


async def call_async(job: Job, context: RunContext) -> Outcome:
    """Await a coroutine function on the running loop."""
    try:
        await bound(job, context)
    except Exception as error:  # noqa: BLE001 - a job's failure is data, not our crash
        return failed(error)
    return SUCCEEDED
