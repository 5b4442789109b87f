"""The retirement rules, one by one, as pure functions of the nodes and the job's last
registration."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduler.cron import parse_schedule
from scheduler.model import ONE_SHOT
from scheduler.retirement import LOST_NODES_KEPT, REGISTRATION_SLACK, fleet, retired
from scheduler.store.queries import NodeRow

NOW = datetime(2026, 11, 30, 12, 30, tzinfo=UTC)
HOURLY = parse_schedule("0 * * * *")


def node(
    name: str,
    started: datetime,
    *,
    beat: datetime = NOW,
    stopped: datetime | None = None,
    digest: str | None = "abc",
) -> NodeRow:
    return NodeRow(name, name, "host", 1, "0.1.0", started, beat, stopped, digest)


def alive(row: NodeRow) -> bool:
    return row.stopped_at is None and NOW - row.heartbeat_at < timedelta(seconds=30)


def is_retired(last_seen: datetime, *nodes: NodeRow, one_shots: tuple[datetime, ...] = ()) -> bool:
    return retired(HOURLY, last_seen, fleet(nodes, alive, NOW, one_shots), NOW)


def test_a_job_that_a_live_node_registered_is_not_retired() -> None:
    started = NOW - timedelta(days=30)
    assert not is_retired(started - timedelta(seconds=2), node("a", started))


def test_a_job_that_no_live_node_registered_is_retired() -> None:
    old_start = NOW - timedelta(days=3)
    removed = old_start - timedelta(seconds=1)
    nodes = (node("new", NOW - timedelta(hours=1)), node("old", old_start, stopped=NOW))
    assert is_retired(removed, *nodes)


def test_nothing_is_retired_while_no_daemon_is_alive() -> None:
    stopped = node("new", NOW - timedelta(hours=1), stopped=NOW - timedelta(minutes=1))
    assert not is_retired(NOW - timedelta(days=3), stopped)
    one_shot = node("cron", NOW - timedelta(seconds=5), digest=ONE_SHOT)
    assert not is_retired(NOW - timedelta(days=3), one_shot)


def test_a_node_lost_lately_may_come_back_with_its_jobs() -> None:
    registered = NOW - timedelta(hours=5)
    lost = node("lost", registered + timedelta(seconds=1), beat=NOW - timedelta(hours=2))
    live = node("live", NOW - timedelta(hours=1))
    assert not is_retired(registered, live, lost)
    long_lost = node("gone", registered, beat=NOW - LOST_NODES_KEPT - timedelta(minutes=1))
    assert is_retired(registered, live, long_lost)


def test_the_slack_between_registering_and_starting_counts_as_carried() -> None:
    registered = NOW - timedelta(hours=1)
    late = node("late", registered + REGISTRATION_SLACK - timedelta(seconds=1))
    assert not is_retired(registered, late)
    assert is_retired(registered, node("later", registered + REGISTRATION_SLACK * 2))


def test_a_job_a_one_shot_command_registered_waits_two_of_its_periods() -> None:
    live = node("daemon", NOW - timedelta(minutes=5))
    # Registered by run-once at 11:00:03 (the 11:00 period); 12:00 has fallen due since.
    at_eleven = datetime(2026, 11, 30, 11, 0, 3, tzinfo=UTC)
    started = (at_eleven + timedelta(seconds=1),)
    assert not is_retired(at_eleven, live, one_shots=started), "only one period missed"
    at_ten = at_eleven - timedelta(hours=1)
    assert is_retired(at_ten, live, one_shots=(at_ten + timedelta(seconds=1),))
    assert is_retired(at_eleven, live), "a daemon registered it: one stopped daemon suffices"
