"""The pytest plugin of `scheduler.testing`, loaded by pytest through the `pytest11` entry
point: fixtures that cost nothing until a test asks for one (this module imports the
scheduler only then).

    @pytest.fixture
    def scheduler_jobs():
        return my_app.jobs            # a module of @job functions, or a list of them

    def test_nightly(scheduler_clock, scheduler_harness):
        scheduler_clock.advance("1d")
        scheduler_harness.assert_periods("nightly", ["2026-01-01T02:30Z"])

`@pytest.mark.scheduler(start="2026-03-28T00:00Z", jobs=[...])` sets the start (and the
jobs) for one test: the mark comes first, then the `scheduler_jobs` and `scheduler_start`
fixtures, so a project's `conftest.py` can name its jobs once and a test can still mark
others.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from scheduler.testing.clock import VirtualClock
    from scheduler.testing.harness import Harness

DEFAULT_START = "2026-01-01T00:00:00Z"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "scheduler(start=..., jobs=..., retry_jitter=False): the virtual start time (UTC), "
        "the jobs of scheduler_harness for this test, and whether its retries are jittered",
    )


def _marked(request: pytest.FixtureRequest, name: str) -> Any:
    marker = request.node.get_closest_marker("scheduler")
    return None if marker is None else marker.kwargs.get(name)


@pytest.fixture
def scheduler_jobs(request: pytest.FixtureRequest) -> Any:
    """The jobs under test: override this fixture (a module, or a list of @job functions),
    or name them with `@pytest.mark.scheduler(jobs=...)`."""
    jobs = _marked(request, "jobs")
    if jobs is None:
        raise pytest.UsageError(
            "scheduler_harness: no jobs; define a `scheduler_jobs` fixture that returns "
            "your jobs module (or a list of jobs), or mark the test "
            "@pytest.mark.scheduler(jobs=...)"
        )
    return jobs


@pytest.fixture
def scheduler_start(request: pytest.FixtureRequest) -> str:
    """The virtual time the node starts at (UTC); override it, or mark the test
    `@pytest.mark.scheduler(start="2026-03-28T00:00Z")`."""
    start = _marked(request, "start")
    return str(start) if start is not None else DEFAULT_START


def _marked_or_fixture(request: pytest.FixtureRequest, name: str) -> Any:
    """The mark's `name`, else the fixture `scheduler_<name>` (a project's override, or
    the plugin's own). Read in this order, a conftest.py override cannot hide a mark."""
    marked = _marked(request, name)
    return marked if marked is not None else request.getfixturevalue(f"scheduler_{name}")


@pytest.fixture
def scheduler_harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    """The real scheduler on a SQLite file in the test's `tmp_path`, under a virtual clock:
    the jobs and start of the test's `scheduler` mark, else of the `scheduler_jobs` and
    `scheduler_start` fixtures."""
    from scheduler.testing.harness import Harness  # noqa: PLC0415 - loaded when asked for

    jobs = _marked_or_fixture(request, "jobs")
    start = _marked_or_fixture(request, "start")
    retry_jitter = bool(_marked(request, "retry_jitter"))
    harness = Harness(jobs, start=start, folder=tmp_path, retry_jitter=retry_jitter)
    try:
        yield harness
    finally:
        harness.close()


@pytest.fixture
def scheduler_clock(scheduler_harness: Harness) -> VirtualClock:
    """The harness's clock: `advance("1d")`, `to("2026-03-29T01:59Z")`."""
    return scheduler_harness.clock
