"""Where a job's function is called: the seam between the run path and the work.

An executor calls a job's function once under its timeout and says how it ended; the
job's errors never escape it. Only the executor's own deadline makes an outcome
`timed_out`: whatever the job raises (its own `TimeoutError`, `SystemExit`, any
`BaseException`) is a failure with its traceback. Three ship today:

- `ThreadExecutor`: plain functions, on the worker thread (or a helper thread when there
  is a timeout). A thread cannot be killed: a function that outlives its timeout is
  recorded `timed_out`, told to stop through `ctx.cancelled`, and left to return on its
  own; the outcome says it still runs (`lingering`), so that its retry waits for it.
- `AsyncExecutor`: coroutine functions, on one event loop thread for the node.
- `ProcessExecutor`: `isolation="process"`, a fresh interpreter the node can kill
  (`run/child.py` is the other side). Use it for work that must really stop.

Another executor in the node plugs in by the same contract: honour the timeout, stop
when `context.cancelled` is set, report a child it can kill through `attach`, and say
`lingering` when the work may go on after `call` returns. A task queue is not an
executor of the node: the node only sends the run (`run.remote`, a job's `remote`), and
the worker calls the function with these same executors (`run.delivered`).
"""

from __future__ import annotations

import asyncio
import contextvars
import multiprocessing
import threading
import time
from collections.abc import Callable, Iterable
from concurrent import futures
from contextlib import suppress
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Protocol

from scheduler import call_hooks, logs
from scheduler.model import Failure
from scheduler.policy import Isolation
from scheduler.registry import Job
from scheduler.run.calling import call, call_async
from scheduler.run.child import ChildRun, child_main
from scheduler.run.context import RunContext
from scheduler.run.failures import SUCCEEDED, Lingering, Outcome, failed, timed_out
from scheduler.states import RunStatus

CHILD_POLL_S = 0.1
# Told about the child process of a run as soon as it exists, so that the dispatcher
# can kill it itself when the run is lost.
Attach = Callable[[BaseProcess], None]


class Executor(Protocol):
    def call(self, job: Job, context: RunContext, attach: Attach) -> Outcome:
        """Call the job once and say how it ended."""

    def close(self) -> None:
        """The node is closing: release what the executor holds."""


def timeout_of(job: Job) -> float | None:
    return job.policy.timeout.total_seconds() if job.policy.timeout else None


class ThreadExecutor:
    def call(self, job: Job, context: RunContext, attach: Attach) -> Outcome:
        timeout = timeout_of(job)
        if timeout is None:
            return call(job, context)
        # In a helper thread, so that the caller can stop waiting at the deadline.
        result: list[Outcome] = []
        # The caller's context variables (a current trace span) go with it.
        variables = contextvars.copy_context()
        runner = threading.Thread(
            target=lambda: result.append(variables.run(_call_alone, job, context)),
            name=f"job:{job.name}",
            daemon=True,
        )
        began = time.monotonic()
        runner.start()
        runner.join(timeout)
        if runner.is_alive():
            context.cancelled.set()
            lingering = Lingering(runner, began, timeout)
            return Outcome(RunStatus.TIMED_OUT, timed_out(timeout).failure, lingering=lingering)
        return result[0]

    def close(self) -> None:
        pass


def _call_alone(job: Job, context: RunContext) -> Outcome:
    """The call on a helper thread that ends with it: the hooks around it release what
    they keep for the thread's next call (`call_hooks.last_on_its_thread`)."""
    call_hooks.ends_its_thread()
    return call(job, context)


class AsyncExecutor:
    """One event loop in its own thread; the worker thread waits for its coroutine.

    The coroutine (`call_async`) turns every way the job ends into an outcome, so a
    future still pending when the wait ends means one thing only: the deadline passed.
    (`future.result(timeout)` raises the same `TimeoutError` for its own wait and for a
    `TimeoutError` the job raised, as `asyncio.wait_for` and most clients do.)"""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._serve, name="coroutines", daemon=True).start()

    def _serve(self) -> None:
        """Run the loop until `close`, then release what it holds (its selector)."""
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    def call(self, job: Job, context: RunContext, attach: Attach) -> Outcome:
        timeout = timeout_of(job)
        future = asyncio.run_coroutine_threadsafe(call_async(job, context), self._loop)
        done, _ = futures.wait([future], timeout)
        if not done and timeout is not None:
            context.cancelled.set()
            future.cancel()
            return timed_out(timeout)
        return _settled(future)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)


def _settled(future: futures.Future[Outcome]) -> Outcome:
    """The outcome of a finished coroutine: `call_async` returns one for everything the job
    does, except a cancellation of its own task (the job cancelled the task it runs in)."""
    if future.cancelled():
        return Outcome(
            RunStatus.FAILED,
            Failure("asyncio.exceptions.CancelledError", "the job's task was cancelled", ""),
        )
    error = future.exception()
    return failed(error) if error is not None else future.result()


class ProcessExecutor:
    """A spawned child per run; killed at the deadline or when the run is cancelled."""

    def call(self, job: Job, context: RunContext, attach: Attach) -> Outcome:
        spawn = multiprocessing.get_context("spawn")
        receiver, sender = spawn.Pipe(duplex=False)
        # Only this process holds `lifeline`'s writing end: when it dies, the child reads EOF.
        watched, lifeline = spawn.Pipe(duplex=False)
        items = context.run_items
        payload = ChildRun(
            module=job.func.__module__,
            job=job.name,
            period=context.period,
            run_id=context.run_id,
            attempt=context.attempt,
            node=context.node,
            origin=context.origin,
            log_settings=logs.current(),
            claim=items.claim if items else None,
            database_url=items.database.url.with_password() if items else None,
            template=job.template,
            args=dict(job.args),
        )
        child = spawn.Process(
            target=child_main, args=(payload, sender, watched), name=f"job:{job.name}"
        )
        child.start()
        sender.close()
        watched.close()
        try:
            attach(child)
            return _watch_child(child, receiver, context, timeout_of(job))
        finally:
            lifeline.close()

    def close(self) -> None:
        pass


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
            return timed_out(timeout)
        if context.cancelled.is_set():
            child.kill()
            child.join()
            return Outcome(RunStatus.FAILED, Failure("Cancelled", "the run was cancelled", ""))
    if receiver.poll():
        # Readable at its end too: a child that died before it said anything (a crash in
        # native code, `os._exit`) leaves only EOF, which is its exit status's to tell.
        with suppress(EOFError, OSError):
            failure = receiver.recv()
            return SUCCEEDED if failure is None else Outcome(RunStatus.FAILED, failure)
    return Outcome(
        RunStatus.FAILED,
        Failure(
            "ChildProcessError", f"the job's process ended with exit code {child.exitcode}", ""
        ),
    )


class Executors:
    """The executor of each job, by its isolation and kind; an event loop only when some
    job needs one."""

    def __init__(self, jobs: Iterable[Job]) -> None:
        self._thread = ThreadExecutor()
        self._process = ProcessExecutor()
        self._async = AsyncExecutor() if any(job.is_async for job in jobs) else None

    def for_job(self, job: Job) -> Executor:
        if job.policy.isolation is Isolation.PROCESS:
            return self._process
        if job.is_async:
            assert self._async is not None, "coroutine jobs need the event loop"
            return self._async
        return self._thread

    def close(self) -> None:
        for executor in (self._thread, self._process, self._async):
            if executor is not None:
                executor.close()
