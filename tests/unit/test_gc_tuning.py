"""A node moves its start-up objects out of the collector's sight and collects its young
generation less often (bench/run_path: 60 µs a run spent in collections before)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from scheduler.node.daemon import GC_YOUNG_THRESHOLD, tune_garbage_collection


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("restored_gc")
def test_tuning_freezes_what_is_loaded_and_raises_the_young_threshold() -> None:
    loaded = [{"job": index} for index in range(1000)]
    _, middle_before, old_before = gc.get_threshold()
    tune_garbage_collection()
    assert gc.get_freeze_count() >= len(loaded)
    assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, middle_before, old_before)
