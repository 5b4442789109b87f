"""A JSON log line is the text the standard library's `json.dumps` gives, whatever it
holds: the encoder made once writes what a new one per line wrote. Lines logged inside
`logs.together()` go out at the block's end, in order, in one write."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from scheduler import logs
from scheduler.model import Failure
from scheduler.run.failures import describe
from tests.log_capture import configured


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    out = io.StringIO()
    with configured(out):
        yield out


@pytest.fixture
def log_file(tmp_path: Path) -> Iterator[Path]:
    """Lines go to a real file, read back from the disk as another process would."""
    path = tmp_path / "node.log"
    with path.open("w") as out, configured(out):
        yield path


def events(path: Path) -> list[str]:
    return [json.loads(line)["event"] for line in path.read_text().splitlines()]


def test_lines_are_json_dumps_text(lines: io.StringIO) -> None:
    class Opaque:
        def __repr__(self) -> str:
            return "<opaque>"

    log = logs.get_logger(node="n-ü")
    for _ in range(2):  # the second line comes from the encoder the first one made
        log.info(
            "run_succeeded",
            job="naïve job",
            when=datetime(2026, 12, 4, tzinfo=UTC),
            ratio=0.1,
            nothing=None,
            nested={"a": [1, 2.5, True]},
            opaque=Opaque(),
        )
    first, second = lines.getvalue().splitlines()
    assert first == second.replace(json.loads(second)["timestamp"], json.loads(first)["timestamp"])
    event = json.loads(first)
    # What json.dumps with structlog's fallback (repr for what JSON cannot hold) writes.
    assert first == json.dumps(
        {**event, "when": repr(datetime(2026, 12, 4, tzinfo=UTC))}, default=repr
    )
    assert '"node": "n-\\u00fc"' in first
    assert '"job": "na\\u00efve job"' in first
    assert event["opaque"] == "<opaque>"
    assert event["nested"] == {"a": [1, 2.5, True]}


def test_lines_logged_together_go_out_at_the_end_in_order(log_file: Path) -> None:
    log = logs.get_logger()
    log.info("before")
    with logs.together():
        for number in range(3):
            log.info("run_claimed", number=number)
        with logs.together():  # an inner block leaves them to the outer one
            log.info("run_skipped")
        assert events(log_file) == ["before"]
    claimed = ["run_claimed"] * 3
    assert events(log_file) == ["before", *claimed, "run_skipped"]
    numbers = [json.loads(line).get("number") for line in log_file.read_text().splitlines()]
    assert numbers == [None, 0, 1, 2, None]
    log.info("after")  # and lines are written one by one again
    assert events(log_file)[-1] == "after"


def test_a_block_that_raises_still_writes_its_lines(log_file: Path) -> None:
    log = logs.get_logger()

    def settle() -> None:
        with logs.together():
            log.info("run_succeeded")
            raise RuntimeError("settling failed")

    with pytest.raises(RuntimeError, match="settling failed"):
        settle()
    assert events(log_file) == ["run_succeeded"]


def test_another_threads_lines_are_not_held(log_file: Path) -> None:
    log = logs.get_logger()
    with logs.together():
        log.info("held")
        other = threading.Thread(target=lambda: log.info("from_another_thread"))
        other.start()
        other.join()
        assert events(log_file) == ["from_another_thread"]
    assert events(log_file) == ["from_another_thread", "held"]


@given(st.integers(min_value=0, max_value=253_402_300_799_999_999_999))  # to 9999-12-31
@example(1_764_892_800_000_000_000)  # a whole second: no fraction
@example(1_764_892_800_000_000_999)  # under a microsecond past it: none either
@example(1_764_892_800_999_999_999)  # the last microsecond of it
def test_the_timestamp_is_structlogs_text(nanoseconds: int) -> None:
    second, rest = divmod(nanoseconds, 1_000_000_000)
    moment = datetime.fromtimestamp(second, UTC).replace(microsecond=rest // 1000)
    stamp = logs._UtcStamp()
    for _ in range(2):  # the second from the date and time it kept
        assert stamp.at(nanoseconds) == moment.isoformat().replace("+00:00", "Z")


def test_a_plain_line_is_the_whole_chains_line(lines: io.StringIO) -> None:
    log = logs.get_logger(node="n0").bind(job="nightly", attempt=1)
    log.info("run_started", origin="schedule")  # the plain steps
    log.info("run_started", origin="schedule", exc_info=False)  # the whole chain
    plain, whole = (json.loads(line) for line in lines.getvalue().splitlines())
    assert (
        list(plain)
        == list(whole)
        == ["node", "job", "attempt", "origin", "event", "level", "timestamp"]
    )
    assert {**plain, "timestamp": ""} == {**whole, "timestamp": ""}


def test_a_failure_still_goes_through_the_whole_chain(lines: io.StringIO) -> None:
    def fail() -> None:
        raise ValueError("boom")

    try:
        fail()
    except ValueError:
        logs.get_logger().exception("dispatch_crashed")
    event = json.loads(lines.getvalue())
    assert event["level"] == "error"
    (raised,) = event["exception"]
    assert (raised["exc_type"], raised["exc_value"]) == ("ValueError", "boom")


def test_exception_has_one_shape_on_every_event(lines: io.StringIO) -> None:
    """`run_failed` (a job's failure), `dispatch_crashed` (our own crash, logged with
    `.exception`) and a failure known only as text (a Celery worker's) log `exception`
    alike: a list of {exc_type, exc_value, is_cause, frames}, so that a log pipeline
    maps the field once."""

    def inner() -> None:
        raise KeyError("inner")

    def fail() -> None:
        try:
            inner()
        except KeyError as error:
            raise ValueError("boom") from error

    try:
        fail()
    except ValueError as error:
        logs.get_logger().error("run_failed", failure=describe(error))
        logs.get_logger().exception("dispatch_crashed")
    remote = Failure("ValueError", "boom", "Traceback (most recent call last):\n  ...\n")
    logs.get_logger().error("run_failed", failure=remote)
    failed, crashed, told = (
        json.loads(line)["exception"] for line in lines.getvalue().splitlines()
    )
    assert failed == crashed
    assert [(item["exc_type"], item["exc_value"], item["is_cause"]) for item in failed] == [
        ("ValueError", "boom", False),
        ("KeyError", "'inner'", True),
    ]
    names = {frame["name"] for item in failed for frame in item["frames"]}
    assert {"fail", "inner"} <= names
    keys = {"exc_type", "exc_value", "is_cause", "frames"}
    assert all(set(item) == keys for item in failed)
    (text,) = told
    assert set(text) == keys | {"traceback"}
    assert text["frames"] == []
    assert text["traceback"].startswith("Traceback")


def test_a_terminal_line_is_short_and_scannable() -> None:
    """Time, level, event, then the run's job, period and short run id, then the rest in
    the order given, the node last; a traceback under the line."""
    render = logs.Terminal(colors=False)
    line = render(
        None,
        "info",
        {
            "node": "vm-762-65aac3",
            "job": "tasks.send_reminders",
            "period": "2026-12-07T02:21:00+00:00",
            "run_id": "0b78e8a7c0d1e2f3a4b5c6d7e8f90123",
            "attempt": 1,
            "why": "no session of its own",
            "event": "run_succeeded",
            "level": "info",
            "timestamp": "2026-12-07T02:21:19.815123Z",
        },
    )
    assert line == (
        "02:21:19.815 info    run_succeeded        tasks.send_reminders 2026-12-07T02:21:00Z"
        " 0b78e8a7 attempt=1 why='no session of its own' node=vm-762-65aac3"
    )
    failed = render(
        None,
        "error",
        {
            "event": "dispatch_crashed",
            "level": "error",
            "timestamp": "2026-12-07T02:21:19Z",
            "exception": "Traceback (most recent call last):\n  ...\nValueError: boom\n",
        },
    )
    assert failed.splitlines() == [
        "02:21:19     error   dispatch_crashed",
        "Traceback (most recent call last):",
        "  ...",
        "ValueError: boom",
    ]
    assert len(line) < 160
