"""Jobs whose own exceptions are theirs: a built-in `TimeoutError` from `asyncio.wait_for`,
a `CancelledError` of their own, and `SystemExit`, `KeyboardInterrupt` and a
`BaseException` subclass raised on each executor (thread, event loop, child process).
Each must be recorded as a failure of its attempt, never as the scheduler's timeout and
never as a crash of the node. A body notes each call when EXECUTION_LOG is set."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from scheduler import RunContext, job
from scheduler.registry import Job
from tests.acceptance.jobmods.evidence import note


class Halt(BaseException):
    """A job's own BaseException subclass (as some frameworks raise to unwind)."""


def _noted(ctx: RunContext) -> None:
    if "EXECUTION_LOG" in os.environ:
        note(ctx, "attempt")


@job(cron="* * * * * *", name="waits-too-little")
async def waits_too_little(ctx: RunContext) -> None:
    """A client's own deadline, as aiohttp and most clients raise it; every second."""
    _noted(ctx)
    await asyncio.wait_for(asyncio.sleep(10), 0.05)


@job(cron="0 0 * * *", name="waits-too-little-30s", timeout="30s")
async def waits_too_little_30s(ctx: RunContext) -> None:
    """The same under a timeout of the scheduler's own, far from reached."""
    _noted(ctx)
    await asyncio.wait_for(asyncio.sleep(10), 0.1)


@job(cron="0 0 * * *", name="own-cancel")
async def own_cancel(ctx: RunContext) -> None:
    """Awaits a task of its own that it cancelled: the CancelledError is the job's."""
    _noted(ctx)
    task = asyncio.create_task(asyncio.sleep(10))
    await asyncio.sleep(0)
    task.cancel()
    await task


RAISED: dict[str, Callable[[], BaseException]] = {
    "system-exit": lambda: SystemExit(3),
    "keyboard-interrupt": lambda: KeyboardInterrupt("interrupted by the job"),
    "halt": lambda: Halt("unwound by the job"),
}
# Each kind on each executor: "thread-system-exit", "async-halt", "process-keyboard-interrupt"…
EXECUTORS = ("thread", "async", "process")


def _raising(executor: str, kind: str) -> Job:
    make = RAISED[kind]
    name = f"{executor}-{kind}"
    if executor == "async":

        async def coroutine(ctx: RunContext) -> None:
            _noted(ctx)
            raise make()

        return job(cron="0 0 * * *", name=name)(coroutine)

    def function(ctx: RunContext) -> None:
        _noted(ctx)
        raise make()

    isolation = "process" if executor == "process" else "thread"
    return job(cron="0 0 * * *", name=name, isolation=isolation)(function)


# Module attributes, so that a child process finds them by name.
for _executor in EXECUTORS:
    for _kind in RAISED:
        globals()[f"{_executor}_{_kind}".replace("-", "_")] = _raising(_executor, _kind)
