"""The pytest plugin as a user's project meets it: loaded through its entry point, its
fixtures and mark, a clear error without jobs, and `-p no:cronclaim` to turn it off."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]
# Each test starts a pytest process (3 to 6 s on two cores).
pytestmark = pytest.mark.slow

USER_TESTS = """
import pytest
from scheduler import job

@job(cron="0 * * * *", name="hourly")
def hourly():
    pass

@pytest.fixture
def scheduler_jobs():
    return [hourly]

def test_a_day_of_hours(scheduler_clock, scheduler_harness):
    scheduler_clock.advance("1d")
    assert len(scheduler_harness.periods("hourly", status="succeeded")) == 24

@pytest.mark.scheduler(start="2026-06-01T00:30Z")
def test_the_mark_sets_the_start(scheduler_clock, scheduler_harness):
    scheduler_clock.advance("1h")
    scheduler_harness.assert_periods("hourly", ["2026-06-01T01:00Z"])
"""


NO_JOBS = """
def test_no_jobs(scheduler_harness):
    pass
"""


def test_the_fixtures_the_mark_and_a_harness_without_jobs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TESTS, test_no_jobs=NO_JOBS)
    # In a process of its own, as a user's run is: an in-process run would unload the
    # modules it imported (SQLAlchemy's among them) from under this one.
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*define a `scheduler_jobs` fixture*"])


CONFTEST = """
import pytest
from scheduler import job

@job(cron="0 * * * *", name="hourly")
def hourly():
    pass

@pytest.fixture
def scheduler_jobs():
    return [hourly]

@pytest.fixture
def scheduler_start():
    return "2026-06-01T00:30Z"
"""

MARKED_TESTS = """
import pytest
from scheduler import job

@job(cron="0 6 * * *", name="daily")
def daily():
    pass

@pytest.mark.scheduler(jobs=[daily], start="2026-03-01T00:00Z")
def test_the_mark_comes_before_the_conftests_fixtures(scheduler_clock, scheduler_harness):
    assert sorted(scheduler_harness.jobs) == ["daily"]
    scheduler_clock.advance("2d")
    scheduler_harness.assert_periods("daily", ["2026-03-01T06:00Z", "2026-03-02T06:00Z"])

@pytest.mark.scheduler(start="2026-03-01T00:30Z")
def test_a_mark_without_jobs_takes_the_conftests(scheduler_clock, scheduler_harness):
    assert sorted(scheduler_harness.jobs) == ["hourly"]
    scheduler_clock.advance("1h")
    scheduler_harness.assert_periods("hourly", ["2026-03-01T01:00Z"])

@pytest.mark.scheduler(jobs=[daily])
def test_a_mark_without_a_start_takes_the_conftests(scheduler_clock, scheduler_harness):
    scheduler_clock.advance("6h")
    scheduler_harness.assert_periods("daily", ["2026-06-01T06:00Z"])

def test_no_mark_takes_both_fixtures(scheduler_clock, scheduler_harness):
    scheduler_clock.advance("1h")
    scheduler_harness.assert_periods("hourly", ["2026-06-01T01:00Z"])
"""


def test_a_mark_comes_before_a_conftest_that_overrides_the_fixtures(
    pytester: pytest.Pytester,
) -> None:
    """The guide's setup: jobs named once in conftest.py, other jobs marked on a test."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_marked=MARKED_TESTS)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)


def test_the_plugin_can_be_turned_off(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "-p", "no:cronclaim")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*fixture 'scheduler_clock' not found*"])
