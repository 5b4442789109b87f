"""Group commit: concurrent writes share a batch; one bad request fails alone."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from scheduler.run.groupcommit import GroupCommit, _Slot


class PoisonedError(Exception):
    pass


def test_a_lone_write_goes_at_once_and_answers_in_order() -> None:
    batches: list[list[int]] = []

    def write(requests: Sequence[int]) -> list[int]:
        batches.append(list(requests))
        return [request * 10 for request in requests]

    group: GroupCommit[int, int] = GroupCommit(write, isolate=lambda _: False)
    assert group.submit(4) == 40
    assert group.submit(5) == 50
    assert batches == [[4], [5]]


def test_writes_that_arrive_during_a_write_go_together_in_the_next() -> None:
    first_entered, release = threading.Event(), threading.Event()
    batches: list[list[int]] = []

    def write(requests: Sequence[int]) -> list[int]:
        batches.append(list(requests))
        if len(batches) == 1:
            first_entered.set()
            release.wait(5)
        return [request + 1 for request in requests]

    group: GroupCommit[int, int] = GroupCommit(write, isolate=lambda _: False)
    with ThreadPoolExecutor(max_workers=9) as pool:
        first = pool.submit(group.submit, 0)
        first_entered.wait(5)
        later = [pool.submit(group.submit, n) for n in range(1, 9)]
        while len(group._pending) < 8:
            threading.Event().wait(0.001)
        release.set()
        assert first.result(5) == 1
        assert [future.result(5) for future in later] == list(range(2, 10))
    assert batches[0] == [0]
    assert sorted(batches[1]) == list(range(1, 9)), "the eight waiting writes share one batch"
    assert len(batches) == 2


def test_a_poisoned_request_fails_alone_when_the_error_may_be_its_own() -> None:
    def write(requests: Sequence[int]) -> list[int]:
        if -1 in requests:
            raise PoisonedError("bad row")
        return list(requests)

    group: GroupCommit[int, int] = GroupCommit(
        write, isolate=lambda e: isinstance(e, PoisonedError)
    )
    slots: list[_Slot[int, int]] = [_Slot(n) for n in (1, -1, 2)]
    group._send(slots)
    assert [slot.outcome() for slot in (slots[0], slots[2])] == [1, 2]
    with pytest.raises(PoisonedError):
        slots[1].outcome()


def test_a_lost_connection_fails_the_whole_batch_without_retrying_each() -> None:
    calls: list[list[int]] = []

    def write(requests: Sequence[int]) -> list[int]:
        calls.append(list(requests))
        raise ConnectionError("gone")

    group: GroupCommit[int, int] = GroupCommit(
        write, isolate=lambda e: isinstance(e, PoisonedError)
    )
    slots: list[_Slot[int, int]] = [_Slot(n) for n in (1, 2, 3)]
    group._send(slots)
    assert calls == [[1, 2, 3]]
    for slot in slots:
        with pytest.raises(ConnectionError):
            slot.outcome()
