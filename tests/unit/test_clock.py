"""Which reading of the database's clock a node keeps: the tightest that still agrees.

Readings are made up here (the statement's send and reply instants and the server's
answer); the integration tests read a real server through a real proxy."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from scheduler.model import ClockReading
from scheduler.node.clock import DRIFT, Clock

# The database's clock in these tests: this far ahead of the host's.
AHEAD = timedelta(seconds=30)


def _reading(round_trip: float, *, server_after: float, off: float = 0.0) -> ClockReading:
    """A statement sent `round_trip` seconds ago whose server read its clock
    `server_after` seconds after it was sent; `off` moves the database's clock."""
    received = time.monotonic()
    sent = received - round_trip
    moment = (
        datetime.now(UTC)
        + AHEAD
        - timedelta(seconds=round_trip - server_after)
        + timedelta(seconds=off)
    )
    return ClockReading(sent, moment, received)


def _error(clock: Clock) -> float:
    """Seconds the clock is off from the database's made-up clock now."""
    return (clock.now() - (datetime.now(UTC) + AHEAD)).total_seconds()


def test_the_first_reading_is_taken_however_loose() -> None:
    clock = Clock()
    clock.calibrate(_reading(2.0, server_after=0.0))
    assert abs(_error(clock) - -1.0) < 0.05


def test_a_looser_reading_that_agrees_does_not_replace_a_tight_one() -> None:
    clock = Clock()
    clock.calibrate(_reading(0.002, server_after=0.001))
    # The server read its clock as soon as the statement arrived; its reply took 2 s.
    offset = clock.calibrate(_reading(2.0, server_after=0.0))
    assert abs(_error(clock)) < 0.05
    assert abs(offset - AHEAD) < timedelta(seconds=0.05)


def test_a_tighter_reading_replaces_a_looser_one() -> None:
    clock = Clock()
    clock.calibrate(_reading(1.0, server_after=0.0))
    assert _error(clock) < -0.4
    clock.calibrate(_reading(0.002, server_after=0.001))
    assert abs(_error(clock)) < 0.05


def test_a_reading_that_disagrees_beyond_both_errors_is_taken_its_clock_stepped() -> None:
    clock = Clock()
    clock.calibrate(_reading(0.002, server_after=0.001))
    # Loose (±0.5 s), but 5 s off what the tight reading predicts: the server's clock
    # was stepped back, and periods must be claimed by its clock as it now is.
    clock.calibrate(_reading(1.0, server_after=0.5, off=-5.0))
    assert abs(_error(clock) - -5.0) < 0.05


def test_a_kept_reading_grows_less_sure_with_time_and_yields_to_a_looser_one() -> None:
    clock = Clock()
    # A tight reading made long ago: the drift since may have moved the clocks apart.
    long_ago = 1.0 / DRIFT
    now = time.monotonic()
    moment = datetime.now(UTC) + AHEAD - timedelta(seconds=long_ago)
    clock.calibrate(ClockReading(now - long_ago - 0.001, moment, now - long_ago + 0.001))
    # A reading of ±0.5 s, 0.3 s off the old one's prediction (within both errors), is
    # now the tighter of the two (the old one's error has grown to about 1 s).
    clock.calibrate(_reading(1.0, server_after=0.5, off=0.3))
    assert abs(_error(clock) - 0.3) < 0.05


def test_host_readings_sqlite_always_follow_the_host_clock() -> None:
    clock = Clock()
    now = time.monotonic()
    clock.calibrate(ClockReading.host(datetime.now(UTC), now))
    assert abs((clock.now() - datetime.now(UTC)).total_seconds()) < 0.05
    # A reading of no width is as tight as any: taken even when it agrees, and here
    # it does not (10 s ahead of the last one).
    stepped = datetime.now(UTC) + timedelta(seconds=10)
    offset = clock.calibrate(ClockReading.host(stepped, time.monotonic()))
    assert abs((clock.now() - stepped).total_seconds()) < 0.05
    assert abs(offset - timedelta(seconds=10)) < timedelta(seconds=0.05)
