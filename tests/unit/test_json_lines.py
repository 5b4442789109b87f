"""A line rendered with its bound fields' JSON kept is, byte for byte, the line
structlog's whole chain renders for the same logger and call; whatever the shortcut
cannot vouch for goes through the chain."""

from __future__ import annotations

import enum
import io
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.contextvars import bound_contextvars

from scheduler import json_lines, logs
from tests.log_capture import configured

STAMP = re.compile(r'"timestamp": "[^"]*"')


class Colour(enum.StrEnum):
    RED = "réd"


class Size(enum.IntEnum):
    LARGE = 3


class Opaque:
    def __repr__(self) -> str:
        return "<opaque ü>"


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    out = io.StringIO()
    with configured(out):
        logs.get_logger().info("first")  # the chain makes its encoder
        yield out


def both(log: Any, method: str, event: Any, fields: dict[str, Any]) -> tuple[Any, Any]:
    """The line of this logger's own path, and the whole chain's for the same call,
    timestamps aside (each takes its own)."""
    shortcut = type(log)._process_event(log, method, event, dict(fields))
    chain = cast(Any, type(log).__mro__[1])._process_event(log, method, event, dict(fields))
    return _unstamped(shortcut), _unstamped(chain)


def _unstamped(result: Any) -> Any:
    (text,), options = result
    assert options == {}
    return STAMP.sub('"timestamp": ""', text)


keys = st.sampled_from(
    ["node", "job", "period", "run_id", "attempt", "origin", "event", "level", "timestamp"]
) | st.text(max_size=6)
plain = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from([Colour.RED, Size.LARGE])
)
values = st.recursive(
    plain | st.sampled_from([Opaque(), datetime(2026, 12, 5, tzinfo=UTC)]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)


run_keys = st.sampled_from(["node", "job", "period", "run_id", "attempt", "origin"]) | st.text(
    max_size=6
).filter(lambda key: key not in {"event", "level", "timestamp", "exc_info", "stack_info"})


# The fixture's set-up holds for every example: each binds a logger of its own.
@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    bound=st.dictionaries(run_keys, plain, max_size=6),
    fields=st.dictionaries(run_keys, values, max_size=4),
    event=st.text(max_size=12),
    method=st.sampled_from(["info", "warning", "warn", "error", "exception"]),
)
def test_a_plain_line_is_the_whole_chains_text(
    lines: io.StringIO, bound: dict[str, Any], fields: dict[str, Any], event: str, method: str
) -> None:
    """A run's kind of line: plain bound fields, the call's own, nothing in contextvars."""
    log = logs.get_logger().bind(**bound)
    for _ in range(2):
        shortcut, chain = both(log, method, event, fields)
        assert shortcut == chain
    assert log.__dict__[json_lines._HEAD]  # the bound fields' text was kept, and used


# The fixture's set-up holds for every example: each binds a logger of its own.
@settings(max_examples=400, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    bound=st.dictionaries(keys, values, max_size=6),
    fields=st.dictionaries(keys, values, max_size=4),
    event=st.text(max_size=12) | st.none() | st.integers(),
    method=st.sampled_from(["debug", "info", "warning", "warn", "error", "critical", "exception"]),
    in_context=st.dictionaries(st.sampled_from(["job", "request", "event"]), plain, max_size=2),
)
def test_a_line_is_the_whole_chains_text(
    lines: io.StringIO,
    bound: dict[str, Any],
    fields: dict[str, Any],
    event: Any,
    method: str,
    in_context: dict[str, Any],
) -> None:
    log = logs.get_logger().bind(**bound)
    with bound_contextvars(**in_context):
        for _ in range(2):  # the second from the bound fields' text the first kept
            shortcut, chain = both(log, method, event, fields)
            assert shortcut == chain


def test_a_runs_lines_take_the_shortcut(lines: io.StringIO) -> None:
    log = logs.get_logger(node="n0-ü").bind(
        job="nightly", period="2026-12-05T00:00:00+00:00", run_id="0a1b", attempt=1
    )
    log.info("run_started", origin="schedule")
    log.info("run_succeeded", duration_ms=12)
    head = log.__dict__[json_lines._HEAD]
    assert head == (
        '{"node": "n0-\\u00fc", "job": "nightly", "period": "2026-12-05T00:00:00+00:00", '
        '"run_id": "0a1b", "attempt": 1'
    )
    started, succeeded = (json.loads(line) for line in lines.getvalue().splitlines()[1:])
    assert list(started) == [
        "node", "job", "period", "run_id", "attempt", "origin", "event", "level", "timestamp"
    ]  # fmt: skip
    assert (started["event"], started["origin"], started["level"]) == (
        "run_started",
        "schedule",
        "info",
    )
    assert (succeeded["event"], succeeded["duration_ms"]) == ("run_succeeded", 12)


def test_a_bound_field_that_can_change_is_read_again_on_each_line(lines: io.StringIO) -> None:
    items = ["a"]
    log = logs.get_logger().bind(items=items)
    log.info("one")
    items.append("b")
    log.info("two")
    assert log.__dict__[json_lines._HEAD] is json_lines._NO_HEAD
    first, second = (json.loads(line) for line in lines.getvalue().splitlines()[1:])
    assert (first["items"], second["items"]) == (["a"], ["a", "b"])


def test_a_failure_or_a_traceback_still_goes_through_the_chain(lines: io.StringIO) -> None:
    log = logs.get_logger(node="n0")

    def fail() -> None:
        raise ValueError("boom")

    try:
        fail()
    except ValueError:
        log.exception("dispatch_crashed")
    log.info("stacked", stack_info=True)
    crashed, stacked = (json.loads(line) for line in lines.getvalue().splitlines()[1:])
    (raised,) = crashed["exception"]
    assert (raised["exc_type"], raised["exc_value"]) == ("ValueError", "boom")
    assert "stack_info" not in stacked
    assert "test_json_lines.py" in stacked["stack"]


def test_the_first_line_after_configure_is_the_chains() -> None:
    out = io.StringIO()
    with configured(out):
        log = logs.get_logger(node="n0")
        log.info("first")  # no encoder yet: structlog gives its options with a line
        assert json_lines._HEAD not in log.__dict__
        log.info("second")
        assert log.__dict__[json_lines._HEAD] == '{"node": "n0"'
    first, second = (STAMP.sub("", line) for line in out.getvalue().splitlines())
    assert first.replace("first", "second") == second
