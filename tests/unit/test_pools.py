"""Concurrency pools without a database: who the limits admit, and the definitions a
user may get wrong, each refused in one line naming the pool or job and the field."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler import Pool, job
from scheduler.errors import JobDefinitionError
from scheduler.policy import PoolDefinitionError, admitted, key_for
from scheduler.registry import pools_of


def test_the_oldest_waiting_runs_take_the_free_slots() -> None:
    waiting = [("r1", None), ("r2", None), ("r3", None)]
    assert admitted(2, None, [None], waiting, "r1")
    assert not admitted(2, None, [None], waiting, "r2")
    assert admitted(3, None, [None], waiting, "r2")
    assert not admitted(1, None, [None], waiting, "r1"), "a full pool admits nobody"


def test_a_run_held_back_by_its_key_does_not_hold_back_the_runs_behind_it() -> None:
    waiting = [("a2", "a"), ("a3", "a"), ("b1", "b")]
    assert not admitted(3, 1, ["a"], waiting, "a2")
    assert admitted(3, 1, ["a"], waiting, "b1")
    # Two keys' first runs take the two free slots; the third key waits for the pool.
    waiting = [("b1", "b"), ("c1", "c"), ("d1", "d")]
    assert admitted(3, 1, ["a"], waiting, "c1")
    assert not admitted(3, 1, ["a"], waiting, "d1")


def test_a_run_without_a_key_is_capped_by_the_pool_alone() -> None:
    assert admitted(3, 1, ["a", None], [("n1", None)], "n1")


@given(
    limit=st.integers(1, 5),
    per_key=st.one_of(st.none(), st.integers(1, 3)),
    keys=st.lists(st.sampled_from(["a", "b", "c", None]), max_size=12),
)
def test_admitting_in_order_never_passes_either_limit(
    limit: int, per_key: int | None, keys: list[str | None]
) -> None:
    """Start whoever is admitted, one after another, as the store does under the pool's
    lock: the pool never holds more than its limit, nor a key more than its cap."""
    waiting = [(f"r{index}", key) for index, key in enumerate(keys)]
    running: list[str | None] = []
    progress = True
    while progress:
        progress = False
        for run_id, key in list(waiting):
            if admitted(limit, per_key, running, waiting, run_id):
                running.append(key)
                waiting.remove((run_id, key))
                progress = True
                break
    assert len(running) <= limit
    if per_key is not None:
        assert all(running.count(key) <= per_key for key in set(running) if key is not None)
    # And it stops only when nobody else could start.
    assert len(running) == limit or all(
        per_key is not None and key is not None and running.count(key) >= per_key
        for _, key in waiting
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"name": "", "limit": 1}, "pool '': name: must be a non-empty string"),
        ({"name": "reports", "limit": 0}, "pool 'reports': limit: must be a whole number ≥ 1"),
        (
            {"name": "reports", "limit": 2, "per_key": 0},
            "pool 'reports': per_key: must be a whole number ≥ 1",
        ),
        ({"name": "reports", "limit": True}, "pool 'reports': limit: must be a whole number"),
    ],
)
def test_a_pool_that_cannot_work_is_refused(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(PoolDefinitionError, match=message):
        Pool(**arguments)  # type: ignore[arg-type]


def test_a_job_names_its_pool_and_key_or_is_refused_in_one_line() -> None:
    reports = Pool("reports", limit=2, per_key=1)
    with pytest.raises(JobDefinitionError, match="job 'x': pool: must be a Pool"):
        job(cron="* * * * *", name="x", pool="reports")(lambda: None)  # type: ignore[arg-type]
    with pytest.raises(JobDefinitionError, match="job 'x': concurrency_key: needs a pool"):
        job(cron="* * * * *", name="x", concurrency_key="t")(lambda: None)
    with pytest.raises(JobDefinitionError, match=re.escape("concurrency_key: '{tenant}' names")):
        job(cron="* * * * *", name="x", pool=reports, concurrency_key="{tenant}")(lambda: None)
    with pytest.raises(JobDefinitionError, match="concurrency_key: is not a valid template"):
        job(cron=None, name="x", pool=reports, concurrency_key="{tenant")(lambda ctx: None)


def test_one_pool_has_one_definition_across_jobs() -> None:
    first = job(cron="* * * * *", name="one", pool=Pool("reports", limit=2))(lambda: None)
    second = job(cron="* * * * *", name="two", pool=Pool("reports", limit=3))(lambda: None)
    same = job(cron="* * * * *", name="three", pool=Pool("reports", limit=2))(lambda: None)
    assert pools_of([first, same]) == {"reports": Pool("reports", limit=2)}
    with pytest.raises(PoolDefinitionError, match="pool 'reports': limit: declared 2 and 3"):
        pools_of([first, second])


def test_a_schedules_key_comes_from_its_arguments() -> None:
    assert key_for("tpl", "tenant-{tenant}", {"tenant": 42}) == "tenant-42"
    assert key_for("tpl", None, {"tenant": 42}) is None
    with pytest.raises(JobDefinitionError, match="concurrency_key: the arguments hold no 'tenant'"):
        key_for("tpl", "{tenant}", {})
