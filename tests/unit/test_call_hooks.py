"""What an app registers around calls (Django's connection hygiene) wraps each call of a
plain job function, in the thread that makes it, whether the function returns or raises;
with a timeout, that is the helper thread the function runs in, which ends with the call
(`last_on_its_thread`)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import pytest
import structlog

from scheduler import call_hooks
from scheduler.registry import job
from scheduler.run.calling import call
from scheduler.run.context import RunContext
from scheduler.run.executors import ThreadExecutor
from scheduler.states import Origin, RunStatus

PERIOD = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


@pytest.fixture
def seen() -> Iterator[list[tuple[str, str]]]:
    """What happened, and on which thread: the hook registered for the test only."""
    happened: list[tuple[str, str]] = []

    @contextmanager
    def around() -> Iterator[None]:
        happened.append(("begin", threading.current_thread().name))
        try:
            yield
        finally:
            happened.append(("end", threading.current_thread().name))
            if call_hooks.last_on_its_thread():
                happened.append(("thread ends", threading.current_thread().name))

    call_hooks.around_calls(around)
    call_hooks.around_calls(around)  # twice: still once
    yield happened
    call_hooks.clear()


def _context(name: str) -> RunContext:
    return RunContext(name, PERIOD, "run-1", 1, "node-1", Origin.SCHEDULE, structlog.get_logger())


def test_each_call_begins_and_ends_inside_the_hook_on_its_own_thread(
    seen: list[tuple[str, str]],
) -> None:
    @job("* * * * *", name="plain")
    def plain() -> None:
        seen.append(("body", threading.current_thread().name))

    @job("* * * * *", name="raising")
    def raising() -> None:
        seen.append(("body", threading.current_thread().name))
        raise ValueError("the job's own")

    outcomes = []
    worker = threading.Thread(
        target=lambda: outcomes.extend(
            [call(plain, _context("plain")), call(raising, _context("raising"))]
        ),
        name="run_7",
    )
    worker.start()
    worker.join(10)
    assert [outcome.status for outcome in outcomes] == [RunStatus.SUCCEEDED, RunStatus.FAILED]
    assert seen == [("begin", "run_7"), ("body", "run_7"), ("end", "run_7")] * 2


def test_with_a_timeout_the_hook_runs_in_the_helper_thread(seen: list[tuple[str, str]]) -> None:
    @job("* * * * *", name="bounded", timeout="30s")
    def bounded() -> None:
        seen.append(("body", threading.current_thread().name))

    outcome = ThreadExecutor().call(bounded, _context("bounded"), lambda _: None)
    assert outcome.status is RunStatus.SUCCEEDED
    # That thread serves this one call: the hook is told, to release what it keeps.
    assert seen == [
        ("begin", "job:bounded"),
        ("body", "job:bounded"),
        ("end", "job:bounded"),
        ("thread ends", "job:bounded"),
    ]


def test_nothing_is_entered_when_nothing_is_registered() -> None:
    assert call_hooks.registered() == ()

    @job("* * * * *", name="bare")
    def bare() -> None:
        pass

    assert call(bare, _context("bare")).status is RunStatus.SUCCEEDED
