"""`LoopTurns`: the main loop is judged by its own due time plus the grace, never by the
time since its last turn."""

from __future__ import annotations

import time
from datetime import timedelta

from scheduler.node.turns import LoopTurns


def test_a_loop_asleep_until_its_next_period_is_never_overdue() -> None:
    turns = LoopTurns(timedelta(milliseconds=10))
    turns.waiting(3600.0)
    time.sleep(0.05)
    assert turns.overdue() == 0.0
    assert turns.stalled() is None
    turns.waiting(None)  # nothing scheduled: it wakes only to stop
    time.sleep(0.05)
    assert turns.stalled() is None


def test_a_loop_past_its_due_time_and_the_grace_is_stalled_and_says_by_how_long() -> None:
    turns = LoopTurns(timedelta(milliseconds=50))
    turns.waiting(0.0)
    assert turns.stalled() is None, "within the grace"
    time.sleep(0.1)
    line = turns.stalled()
    assert line is not None
    assert line.startswith("main loop overdue: its next turn was due 0.1s ago"), line
    assert line.endswith("(grace 0.05s, --healthz-grace)"), line
    assert "\n" not in line


def test_progress_inside_a_turn_and_the_end_of_the_loop_clear_it() -> None:
    turns = LoopTurns(timedelta(milliseconds=50))
    turns.waiting(0.0)
    time.sleep(0.1)
    assert turns.stalled() is not None
    turns.moved()
    assert turns.stalled() is None
    time.sleep(0.1)
    assert turns.stalled() is not None
    turns.stopping()  # the drain after the loop is bounded by --grace
    assert turns.overdue() == 0.0


def test_start_up_counts_as_the_first_turn() -> None:
    turns = LoopTurns(timedelta(milliseconds=50))
    assert turns.stalled() is None
    time.sleep(0.1)
    assert turns.stalled() is not None
