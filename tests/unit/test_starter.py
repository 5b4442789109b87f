"""The starter starts no more items than there are free workers, and hands over the
ones it could not start for the slow path."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest
import structlog

from scheduler.run import starter as starter_module
from scheduler.run.starter import Starter


def test_batches_never_exceed_the_free_workers_and_failures_fall_back() -> None:
    batches: list[list[int]] = []
    handed: list[tuple[int, bool]] = []
    everything = threading.Event()

    def start(batch: Sequence[int]) -> list[bool]:
        batches.append(list(batch))
        if 7 in batch:
            raise RuntimeError("a bug in one batch")
        return [item % 2 == 0 for item in batch]

    def hand(item: int, started: bool) -> None:
        handed.append((item, started))
        if len(handed) == 10:
            everything.set()

    starter: Starter[int] = Starter(3, start, hand, structlog.get_logger())
    for item in range(10):
        starter.add(item)
    time.sleep(0.2)
    assert sum(len(batch) for batch in batches) == 3, "three workers, three starts"
    for done in range(7):  # the workers finish one by one
        starter.release()
        deadline = time.monotonic() + 5
        while len(handed) < 4 + done and time.monotonic() < deadline:
            time.sleep(0.01)
    assert everything.wait(5)
    starter.close()
    assert all(len(batch) <= 3 for batch in batches)
    assert sorted(item for batch in batches for item in batch) == list(range(10))
    failed = next(batch for batch in batches if 7 in batch)
    for item, started in handed:
        assert started == (item % 2 == 0 and item not in failed), item


def _recording() -> tuple[list[list[int]], threading.Event, Starter[int]]:
    batches: list[list[int]] = []
    first = threading.Event()

    def start(batch: Sequence[int]) -> list[bool]:
        batches.append(list(batch))
        first.set()
        return [True] * len(batch)

    starter: Starter[int] = Starter(4, start, lambda _item, _started: None, structlog.get_logger())
    return batches, first, starter


def test_a_run_with_a_free_worker_and_no_queue_starts_alone_at_once() -> None:
    batches, first, starter = _recording()
    try:
        starter.add(1)
        assert first.wait(5)
        assert batches == [[1]]
    finally:
        starter.close()


def test_in_a_backlog_workers_freed_within_the_linger_join_one_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Four workers, all busy; twelve runs wait. Workers freed one after the other within
    the linger go out in one batch, not one statement each (a long linger here, so that
    a slow machine cannot split the batch)."""
    monkeypatch.setattr(starter_module, "BACKLOG_LINGER_S", 30.0)
    batches, first, starter = _recording()
    try:
        assert starter.take(4) == 4  # every worker busy (set aside, as a claim does)
        for item in range(12):
            starter.add(item)
        for _ in range(4):
            starter.release()
            time.sleep(0.05)
        assert first.wait(5)
        assert batches[0] == [0, 1, 2, 3]
    finally:
        starter.close()
