"""Declaring jobs: every mistake names the job and the field, and nothing half-registers."""

from __future__ import annotations

import functools
import inspect
from datetime import timedelta
from typing import Any

import pytest

from scheduler.errors import JobDefinitionError
from scheduler.policy import Catchup, Isolation, Overlap
from scheduler.registry import _parameter_counts, job


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
        ({"catchup_budget": "ten/1h"}, "catchup_budget", "'ten'"),
        ({"catchup_budget": "0/1h"}, "catchup_budget", "≥ 1"),
        ({"catchup_budget": "10/soon"}, "catchup_budget", "'soon'"),
        ({"catchup_budget": "10/0s"}, "catchup_budget", "at least 1s"),
        ({"catchup_budget": "10"}, "catchup_budget", "RUNS/DURATION"),
        ({"catchup_budget": (10, [1])}, "catchup_budget", "[1]"),
        ({"catchup_budget": 10}, "catchup_budget", "RUNS/DURATION"),
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


def _positional_only(context: object, /) -> object:
    return context


async def _asynchronous(context: object = None) -> object:
    return context


@functools.wraps(_positional_only)
def _wrapper(*args: Any, **kwargs: Any) -> object:
    return _positional_only(*args, **kwargs)


class _CallableObject:
    def __call__(self, context: object, extra: int = 1) -> object:
        return context


@pytest.mark.parametrize(
    "func",
    [
        lambda: None,
        lambda ctx: ctx,
        lambda ctx=None: ctx,
        lambda a, b: None,
        lambda a, b=1: None,
        lambda *args: None,
        lambda **kwargs: None,
        lambda a, *args, b, **kwargs: None,
        lambda *, ctx: ctx,
        _positional_only,
        _asynchronous,
        _wrapper,
        _CallableObject(),
        functools.partial(lambda a, b: None, 1),
    ],
)
def test_parameters_are_counted_as_inspect_counts_them(func: Any) -> None:
    """The code-object reading of a plain function agrees with `inspect.signature`."""
    parameters = inspect.signature(func).parameters.values()
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [p for p in parameters if p.default is p.empty and p.kind in positional]
    assert _parameter_counts(func) == (len(required), len(parameters))


def test_defaults_follow_the_design() -> None:
    declared = job("0 * * * *")(lambda: None)
    policy = declared.policy
    assert declared.timed.timezone == "UTC"
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


def test_a_catchup_budget_is_runs_per_duration_in_either_spelling() -> None:
    spelled = job("* * * * *", name="budgeted", catchup_budget="10/1h")(lambda: None)
    paired = job("* * * * *", name="paired", catchup_budget=(10, "1h"))(lambda: None)
    assert spelled.policy.catchup_budget == paired.policy.catchup_budget
    budget = spelled.policy.catchup_budget
    assert budget is not None
    assert budget.runs == 10
    assert budget.pace == timedelta(minutes=6)
    assert job("* * * * *", name="free")(lambda: None).policy.catchup_budget is None


def test_job_without_parentheses_is_refused_in_one_line() -> None:
    def send_reminders(ctx: Any) -> None:
        pass

    with pytest.raises(JobDefinitionError) as raised:
        job(send_reminders)  # type: ignore[arg-type] # what `@job` bare does
    assert str(raised.value) == (
        f"job '{__name__}.test_job_without_parentheses_is_refused_in_one_line.<locals>"
        f'.send_reminders\': cron: @job needs cron=…: write @job(cron="0 9 * * *")'
        " (cron=None: a template)"
    )
    assert raised.value.field == "cron"
