"""The starter starts no more items than there are free workers, and hands over the
ones it could not start for the slow path."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import structlog

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
