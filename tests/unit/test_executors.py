"""The thread and event-loop executors, called directly: only their own deadline makes an
outcome `timed_out`; whatever the job raises is its failure, with its traceback, and the
executor serves the next call as before (the event loop survives a `SystemExit`)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest
import structlog

from scheduler.registry import Job, job
from scheduler.run.context import RunContext
from scheduler.run.executors import AsyncExecutor, Executor, ThreadExecutor
from scheduler.run.failures import Outcome
from scheduler.states import Origin, RunStatus

PERIOD = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


class Halt(BaseException):
    """A job's own BaseException."""


RAISED: list[Callable[[], BaseException]] = [
    TimeoutError,
    lambda: SystemExit(3),
    lambda: KeyboardInterrupt("interrupted by the job"),
    lambda: Halt("unwound by the job"),
]
IDS = ["TimeoutError", "SystemExit", "KeyboardInterrupt", "Halt"]


def _context() -> RunContext:
    return RunContext("job", PERIOD, "run-1", 1, "node-1", Origin.SCHEDULE, structlog.get_logger())


def _call(executor: Executor, declared: Job) -> Outcome:
    return executor.call(declared, _context(), lambda _child: None)


@pytest.fixture
def loop_executor() -> Iterator[AsyncExecutor]:
    executor = AsyncExecutor()
    yield executor
    executor.close()


@pytest.fixture
def succeeds() -> Job:
    @job("* * * * *", name="succeeds")
    async def succeeds() -> None:
        await asyncio.sleep(0)

    return succeeds


def _failed_with(outcome: Outcome, error_type: str) -> str:
    assert outcome.status is RunStatus.FAILED, outcome
    assert outcome.failure is not None
    assert outcome.failure.type == error_type
    assert outcome.failure.traceback.startswith("Traceback (most recent call last)")
    return outcome.failure.traceback


@pytest.mark.parametrize("timeout", [None, "30s"])
def test_a_coroutines_own_timeout_error_is_its_failure(
    loop_executor: AsyncExecutor, timeout: str | None
) -> None:
    @job("* * * * *", name="client", timeout=timeout)
    async def client() -> None:
        await asyncio.wait_for(asyncio.sleep(10), 0.05)

    began = time.monotonic()
    outcome = _call(loop_executor, client)
    assert time.monotonic() - began < 5
    assert "wait_for" in _failed_with(outcome, "TimeoutError")


def test_only_the_deadline_times_a_coroutine_out(loop_executor: AsyncExecutor) -> None:
    stopped = threading.Event()

    @job("* * * * *", name="slow", timeout="0.2s")
    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            stopped.set()
            raise

    outcome = _call(loop_executor, slow)
    assert outcome.status is RunStatus.TIMED_OUT
    assert outcome.failure is not None
    assert outcome.failure.message == "did not finish within 0.2s"
    assert stopped.wait(5), "the coroutine was cancelled"


@pytest.mark.parametrize("raised", RAISED, ids=IDS)
@pytest.mark.parametrize("timeout", [None, "30s"])
def test_whatever_a_coroutine_raises_is_its_failure_and_the_loop_goes_on(
    loop_executor: AsyncExecutor,
    succeeds: Job,
    raised: Callable[[], BaseException],
    timeout: str | None,
) -> None:
    @job("* * * * *", name="raises", timeout=timeout)
    async def raises() -> None:
        await asyncio.sleep(0)
        raise raised()

    error = raised()
    expected = type(error).__qualname__ if type(error) is not Halt else f"{__name__}.Halt"
    assert "raise raised()" in _failed_with(_call(loop_executor, raises), expected)
    assert _call(loop_executor, succeeds).status is RunStatus.SUCCEEDED


def test_a_cancelled_error_of_the_coroutines_own_is_its_failure(
    loop_executor: AsyncExecutor,
) -> None:
    @job("* * * * *", name="own-task", timeout="30s")
    async def own_task() -> None:
        task = asyncio.create_task(asyncio.sleep(10))
        await asyncio.sleep(0)
        task.cancel()
        await task

    @job("* * * * *", name="itself", timeout="30s")
    async def itself() -> None:
        current = asyncio.current_task()
        assert current is not None
        current.cancel()
        await asyncio.sleep(10)

    assert "await task" in _failed_with(
        _call(loop_executor, own_task), "asyncio.exceptions.CancelledError"
    )
    cancelled = _call(loop_executor, itself)
    assert cancelled.status is RunStatus.FAILED, "the job cancelled its own task: not a timeout"
    assert cancelled.failure is not None
    assert cancelled.failure.type == "asyncio.exceptions.CancelledError"


@pytest.mark.parametrize("raised", RAISED, ids=IDS)
@pytest.mark.parametrize("timeout", [None, "30s"])
def test_whatever_a_function_raises_in_its_thread_is_its_failure(
    raised: Callable[[], BaseException], timeout: str | None
) -> None:
    @job("* * * * *", name="raises", timeout=timeout)
    def raises() -> None:
        raise raised()

    error = raised()
    expected = type(error).__qualname__ if type(error) is not Halt else f"{__name__}.Halt"
    outcome = _call(ThreadExecutor(), raises)
    assert "raise raised()" in _failed_with(outcome, expected)
    assert outcome.lingering is None


def test_a_function_past_its_deadline_lingers_with_its_start_and_timeout() -> None:
    release = threading.Event()

    @job("* * * * *", name="stubborn", timeout="0.2s")
    def stubborn() -> None:
        release.wait(10)

    before = time.monotonic()
    outcome = _call(ThreadExecutor(), stubborn)
    try:
        assert outcome.status is RunStatus.TIMED_OUT
        assert outcome.lingering is not None
        assert outcome.lingering.timeout == 0.2
        assert before <= outcome.lingering.began <= before + 0.2
        assert outcome.lingering.thread.is_alive()
    finally:
        release.set()
