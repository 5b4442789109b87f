"""Declaring jobs: every mistake names the job and the field, and nothing half-registers."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from scheduler.errors import JobDefinitionError
from scheduler.policy import Catchup, Isolation, Overlap
from scheduler.registry import job


def _declare(**options: Any) -> None:
    job(**{"cron": "0 * * * *", "name": "billing", **options})(lambda: None)


@pytest.mark.parametrize(
    ("options", "field", "fragment"),
    [
        ({"cron": "0 25 * * *"}, "cron", "hour"),
        ({"timezone": "Moon/Base"}, "timezone", "Moon/Base"),
        ({"lease": "1s"}, "lease", "at least 2s"),
        ({"lease": "soon"}, "lease", "'soon'"),
        ({"overlap": "sometimes"}, "overlap", "'skip', 'queue', 'allow'"),
        ({"timeout": 0}, "timeout", "more than zero"),
        ({"retries": -1}, "retries", "≥ 0"),
        ({"retries": 1.5}, "retries", "1.5"),
        ({"retry_backoff": "fast"}, "retry_backoff", "'fast'"),
        ({"isolation": "container"}, "isolation", "'thread', 'process'"),
        ({"catchup": "some"}, "catchup", "'all', 'latest', 'none'"),
        ({"catchup_window": "-1d"}, "catchup_window", "-1d"),
        ({"catchup_limit": 0}, "catchup_limit", "≥ 1"),
        ({"jitter": "lots"}, "jitter", "'lots'"),
        ({"alert_after": "x"}, "alert_after", "'x'"),
        ({"name": ""}, "name", "non-empty"),
    ],
)
def test_each_bad_option_names_the_job_and_the_field(
    options: dict[str, Any], field: str, fragment: str
) -> None:
    with pytest.raises(JobDefinitionError) as raised:
        _declare(**options)
    assert raised.value.field == field
    assert f": {field}: " in str(raised.value)
    assert fragment in str(raised.value)
    if options.get("name") != "":
        assert str(raised.value).startswith("job 'billing': ")


def test_a_function_must_take_nothing_or_the_context() -> None:
    with pytest.raises(JobDefinitionError, match="function"):
        job("0 * * * *", name="two")(lambda a, b: None)


def test_defaults_follow_the_design() -> None:
    declared = job("0 * * * *")(lambda: None)
    policy = declared.policy
    assert declared.schedule.timezone == "UTC"
    assert (policy.overlap, policy.catchup, policy.isolation) == (
        Overlap.SKIP,
        Catchup.ALL,
        Isolation.THREAD,
    )
    assert (policy.lease, policy.heartbeat) == (timedelta(seconds=30), timedelta(seconds=10))
    assert (policy.retries, policy.max_attempts) == (0, 1)
    assert (policy.catchup_window, policy.catchup_limit) == (timedelta(days=1), 1000)
    assert declared.name.endswith("<lambda>")


def test_the_decorated_function_stays_callable() -> None:
    double = job("0 * * * *", name="double")(lambda ctx: ctx * 2)
    assert double(21) == 42
    assert double.takes_context
