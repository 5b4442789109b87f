"""`run_overdue`: said once for a timed-out function still running as long again as its
timeout past its deadline (a minute at most), never for one that returned in time. The
node's dispatcher and a Celery worker both wait through `outlast`."""

from __future__ import annotations

import threading
import time

import structlog
from structlog.testing import capture_logs

from scheduler.run.failures import Lingering
from scheduler.run.overdue import GRACE_MAX_S, outlast, overdue_after


def _body(seconds: float) -> threading.Thread:
    thread = threading.Thread(target=time.sleep, args=(seconds,), daemon=True)
    thread.start()
    return thread


def test_overdue_is_as_long_again_as_the_timeout_at_most_a_minute_past_it() -> None:
    assert overdue_after(1.0) == 2.0
    assert overdue_after(30.0) == 60.0
    assert overdue_after(3600.0) == 3600.0 + GRACE_MAX_S


def test_a_function_still_running_when_overdue_is_said_once_and_waited_for() -> None:
    began = time.monotonic()
    body = _body(1.0)
    with capture_logs() as logged:
        outlast(Lingering(body, began, 0.2), structlog.get_logger().bind(run_id="r1"))
    assert not body.is_alive(), "outlast returns once the function has"
    (line,) = logged
    assert (line["event"], line["log_level"], line["run_id"], line["timeout_s"]) == (
        "run_overdue",
        "warning",
        "r1",
        0.2,
    )
    assert 0.4 <= line["running_s"] < 1.0


def test_a_function_that_returns_before_it_is_overdue_is_not_said() -> None:
    began = time.monotonic()
    with capture_logs() as logged:
        outlast(Lingering(_body(0.1), began, 0.2), structlog.get_logger())
    assert logged == []
